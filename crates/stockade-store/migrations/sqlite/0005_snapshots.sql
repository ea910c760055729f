-- LC-9, LC-10: snapshots of a sandbox's filesystem, owned by one account.
-- `image_ref` is the committed container image, `blob_key` the `/workspace`
-- tar in the object store. `kind` is 'user' (listed) or 'fork' (the internal
-- snapshot of a fork). A deleted snapshot is DELETING until no container
-- uses its image any more, then DELETED; the row stays (deleted_at set).
CREATE TABLE snapshots (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL,
    source_sandbox_id TEXT NOT NULL,
    name              TEXT NOT NULL,
    kind              TEXT NOT NULL DEFAULT 'user',
    status            TEXT NOT NULL,
    image_ref         TEXT NOT NULL,
    blob_key          TEXT,
    workspace_bytes   INTEGER,
    created_at        TEXT NOT NULL,
    deleted_at        TEXT
);
-- Listing: the account's snapshots (optionally of one sandbox), newest first.
CREATE INDEX snapshots_account_list
    ON snapshots (account_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX snapshots_source
    ON snapshots (source_sandbox_id, created_at DESC) WHERE deleted_at IS NULL;
-- Garbage collection reads what still has an image or archive to remove.
CREATE INDEX snapshots_pending ON snapshots (status) WHERE status IN ('CREATING', 'DELETING');
