-- LC-7: session timeouts. The end of a sandbox's current session (RFC 3339
-- text like the other timestamps); NULL when no session is open or its
-- timeout is 0 (never). The session task finds due sessions by this index.
ALTER TABLE sandboxes ADD COLUMN session_expires_at TEXT;
CREATE INDEX sandboxes_session_expiry
    ON sandboxes (session_expires_at)
    WHERE session_expires_at IS NOT NULL AND deleted_at IS NULL;
