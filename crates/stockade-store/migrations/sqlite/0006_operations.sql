-- DB-9, DB-13: durable operations. At most one per target (a sandbox id, or
-- a snapshot id for a capture): the row is the target's lock across server
-- instances. `holder` is the server process acting on it while
-- `lease_until` (RFC 3339 text like the other timestamps) lies ahead; after
-- that any instance may claim it. `params` is JSON text: what recovery needs.
CREATE TABLE operations (
    id          TEXT PRIMARY KEY NOT NULL,
    target      TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    holder      TEXT NOT NULL,
    lease_until TEXT NOT NULL,
    params      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
-- Recovery finds the expired leases, oldest first; a heartbeat renews one holder's.
CREATE INDEX operations_lease ON operations (lease_until);
CREATE INDEX operations_holder ON operations (holder);

-- DB-11: idempotency keys expire after 24 h; the purge finds them by age.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
