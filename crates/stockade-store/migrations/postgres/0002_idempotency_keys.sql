-- API-2: `Idempotency-Key` on create. One row per (account, key): the hash
-- of the first request's body and the sandbox it created.
CREATE TABLE idempotency_keys (
    account_id   TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    sandbox_id   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (account_id, key)
);
