-- SCALE-4..SCALE-6: the Docker hosts sandboxes are placed on. The server's
-- own `--docker-host` is registered at start under its `--server-name`; an
-- administrator registers more. `sandboxes.server` names a row here.
-- Timestamps are RFC 3339 text like the other tables'.
CREATE TABLE hosts (
    name              TEXT PRIMARY KEY NOT NULL,
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
    cpus              INTEGER,
    memory_bytes      INTEGER,
    -- active, cordoned or draining.
    state             TEXT NOT NULL,
    state_reason      TEXT,
    auto_cordoned     INTEGER NOT NULL DEFAULT 0,
    -- The last health check: NULL healthy is never checked.
    healthy           INTEGER,
    health_reason     TEXT,
    checked_at        TEXT,
    failing_since     TEXT,
    seen_cpus         INTEGER,
    seen_memory_bytes INTEGER,
    disk_free_bytes   INTEGER,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);

-- SCALE-5: a placement sums what the records holding resources reserve on
-- each candidate host, and removing a host counts what it still holds. The
-- resource columns ride along so that the sums read the index alone.
CREATE INDEX sandboxes_server_status
    ON sandboxes (server, status, cpu_millis, memory_bytes) WHERE deleted_at IS NULL;
