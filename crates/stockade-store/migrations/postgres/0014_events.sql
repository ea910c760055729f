-- Lifecycle events, written in the transaction of the change they report
-- (an outbox): `seq` is their order, the feed's cursor.
CREATE TABLE events (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    account_id    TEXT NOT NULL,
    kind          TEXT NOT NULL,
    resource_type TEXT NOT NULL,
    resource_id   TEXT NOT NULL,
    sandbox_id    TEXT,
    execution_id  TEXT,
    template_id   TEXT,
    data          TEXT,
    created_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX events_account ON events (account_id, seq);
CREATE INDEX events_sandbox ON events (sandbox_id, seq);
CREATE INDEX events_created ON events (created_at);

-- Webhooks: where an account wants its events POSTed. `events` is a JSON
-- array of the event types wanted; `enabled` 1 or 0.
CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    name       TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret     TEXT NOT NULL,
    enabled    BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhooks_account ON webhooks (account_id, created_at);

-- One event on its way to one webhook, made with the event. Deliveries of
-- one `ordering_key` (the sandbox) to one webhook go out in `event_seq`
-- order; `claimed_by`/`claimed_until` keep two instances off the same one.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_seq       BIGINT NOT NULL REFERENCES events (seq) ON DELETE CASCADE,
    ordering_key    TEXT NOT NULL,
    status          TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    give_up_at      TIMESTAMPTZ NOT NULL,
    claimed_by      TEXT,
    claimed_until   TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    delivered_at    TIMESTAMPTZ
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_order ON webhook_deliveries (webhook_id, ordering_key, event_seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, event_seq);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_seq);

-- Every attempt at a delivery: its own id (the `e2b-delivery-id` header),
-- the answer's status or why there was none.
CREATE TABLE webhook_attempts (
    id           TEXT PRIMARY KEY,
    delivery_id  TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempted_at TIMESTAMPTZ NOT NULL,
    status_code  BIGINT,
    error        TEXT,
    duration_ms  BIGINT NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, attempted_at);

-- The audit log: every call that changed something or was refused. Never a
-- secret, a body or a query string.
CREATE TABLE audit_log (
    seq         BIGSERIAL PRIMARY KEY,
    id          TEXT NOT NULL,
    account_id  TEXT,
    token_id    TEXT,
    client_ip   TEXT,
    action      TEXT NOT NULL,
    front_end   TEXT NOT NULL,
    resource_id TEXT,
    status      BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX audit_log_account ON audit_log (account_id, seq);
CREATE INDEX audit_log_created ON audit_log (created_at);
