-- SCALE-4..SCALE-6: the Docker hosts sandboxes are placed on. The server's
-- own `--docker-host` is registered at start under its `--server-name`; an
-- administrator registers more. `sandboxes.server` names a row here.
CREATE TABLE hosts (
    name              TEXT PRIMARY KEY,
    -- `unix://…`, `tcp://host:port` or `ssh://[user@]host[:port]`.
    docker_host       TEXT NOT NULL,
    -- TLS client files of a `tcp://` host: all three or none.
    tls_ca            TEXT,
    tls_cert          TEXT,
    tls_key           TEXT,
    address           TEXT,
    -- A JSON object of text labels.
    labels            TEXT NOT NULL DEFAULT '{}',
    -- Capacity set by an administrator; NULL: what the engine reports.
    cpus              BIGINT,
    memory_bytes      BIGINT,
    -- active, cordoned or draining.
    state             TEXT NOT NULL,
    state_reason      TEXT,
    auto_cordoned     BOOLEAN NOT NULL DEFAULT FALSE,
    -- The last health check: NULL healthy is never checked.
    healthy           BOOLEAN,
    health_reason     TEXT,
    checked_at        TIMESTAMPTZ,
    failing_since     TIMESTAMPTZ,
    seen_cpus         BIGINT,
    seen_memory_bytes BIGINT,
    disk_free_bytes   BIGINT,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL
);

-- SCALE-5: a placement sums what the records holding resources reserve on
-- each candidate host, and removing a host counts what it still holds. The
-- resource columns ride along so that the sums read the index alone.
CREATE INDEX sandboxes_server_status
    ON sandboxes (server, status, cpu_millis, memory_bytes) WHERE deleted_at IS NULL;
