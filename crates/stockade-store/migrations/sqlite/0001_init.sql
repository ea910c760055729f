-- Stockade's schema on SQLite. Timestamps are RFC 3339 UTC text with exactly
-- six fractional digits ("2025-01-02T03:04:05.678901Z"), so text order is time order.

CREATE TABLE settings (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

CREATE TABLE accounts (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL UNIQUE,
    is_admin   INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE INDEX accounts_created ON accounts (created_at, id);

-- SEC-2: only the SHA-256 of a token is stored.
CREATE TABLE api_tokens (
    token_hash TEXT PRIMARY KEY NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    created_at TEXT NOT NULL
);
CREATE INDEX api_tokens_account ON api_tokens (account_id);

CREATE TABLE teams (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE team_members (
    team_id    TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    PRIMARY KEY (team_id, account_id)
) WITHOUT ROWID;
CREATE INDEX team_members_account ON team_members (account_id, team_id);

-- One row per sandbox; soft-deleted rows stay (deleted_at set). `metadata` is
-- the snake_case DB-2 document (config, s3_config, s3_sync …).
CREATE TABLE sandboxes (
    id            TEXT PRIMARY KEY NOT NULL,
    account_id    TEXT NOT NULL,
    team_id       TEXT,
    name          TEXT NOT NULL,
    status        TEXT NOT NULL,
    status_reason TEXT,
    server        TEXT NOT NULL,
    container_id  TEXT,
    created_at    TEXT NOT NULL,
    started_at    TEXT,
    stopped_at    TEXT,
    terminated_at TEXT,
    deleted_at    TEXT,
    version       INTEGER NOT NULL DEFAULT 0,
    metadata      TEXT NOT NULL
);

-- DB-7: one active sandbox per name and account.
CREATE UNIQUE INDEX sandboxes_account_name_active
    ON sandboxes (account_id, name) WHERE deleted_at IS NULL;

-- Listing (API-1): newest first within an account or a team. `status` and
-- `deleted_at` ride along so that the count of a page's matches is read from
-- the index alone; the partial index skips soft-deleted rows, which pile up.
CREATE INDEX sandboxes_account_list
    ON sandboxes (account_id, created_at DESC, id DESC, status, deleted_at);
CREATE INDEX sandboxes_account_list_active
    ON sandboxes (account_id, created_at DESC, id DESC, status) WHERE deleted_at IS NULL;
CREATE INDEX sandboxes_team_list
    ON sandboxes (team_id, created_at DESC, id DESC, status, deleted_at) WHERE team_id IS NOT NULL;
-- Reconciliation reads every record not soft-deleted.
CREATE INDEX sandboxes_active
    ON sandboxes (created_at) WHERE deleted_at IS NULL;

CREATE TABLE sandbox_labels (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    label      TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, label)
) WITHOUT ROWID;
-- The ALL-labels filter probes the primary key per sandbox, or starts from
-- the label when it is rare.
CREATE INDEX sandbox_labels_label ON sandbox_labels (label, sandbox_id);
