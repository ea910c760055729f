-- Templates: an account's own images, built by steps. A deleted template
-- keeps its row (deleted_at set) so its id is never reused; its names are
-- free again at once (their rows go).
CREATE TABLE templates (
    id          TEXT PRIMARY KEY NOT NULL,
    account_id  TEXT NOT NULL,
    public      BOOLEAN NOT NULL,
    cpu_count   BIGINT,
    memory_mb   BIGINT,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    deleted_at  TIMESTAMPTZ
);
CREATE INDEX templates_account ON templates (account_id) WHERE deleted_at IS NULL;

-- A template's names (aliases), unique in its account; `position` keeps
-- their order.
CREATE TABLE template_names (
    account_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    template_id TEXT NOT NULL,
    position    BIGINT NOT NULL,
    PRIMARY KEY (account_id, name)
);
CREATE INDEX template_names_template ON template_names (template_id);

-- Builds: `recipe` (base, steps, start and ready commands) and `config`
-- (what the steps left: env, workdir, user) are JSON; `tags` a JSON list.
CREATE TABLE template_builds (
    id          TEXT PRIMARY KEY NOT NULL,
    template_id TEXT NOT NULL,
    account_id  TEXT NOT NULL,
    status      TEXT NOT NULL,
    recipe      TEXT,
    image_ref   TEXT,
    config      TEXT,
    reason      TEXT,
    failed_step BIGINT,
    tags        TEXT NOT NULL,
    server      TEXT,
    sandbox_id  TEXT,
    created_at  TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ
);
CREATE INDEX template_builds_template ON template_builds (template_id, created_at);
CREATE INDEX template_builds_unfinished ON template_builds (status)
    WHERE status IN ('waiting', 'building');

-- A build's log, line by line from offset 0.
CREATE TABLE template_build_logs (
    build_id    TEXT NOT NULL,
    offset_no   BIGINT NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    level       TEXT NOT NULL,
    step        TEXT,
    message     TEXT NOT NULL,
    PRIMARY KEY (build_id, offset_no)
);

-- The build cache: the image after the steps whose inputs hash to `key`.
CREATE TABLE template_layers (
    key         TEXT PRIMARY KEY NOT NULL,
    account_id  TEXT NOT NULL,
    server      TEXT NOT NULL,
    image_ref   TEXT NOT NULL,
    config      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX template_layers_account ON template_layers (account_id);
