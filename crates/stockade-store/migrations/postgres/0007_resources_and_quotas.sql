-- SEC-15, SEC-16: each record's resources as columns, so that admission
-- control per Docker host and account quotas add them up in SQL. Written
-- from the record's spec on every insert and update; filled here from the
-- `config` of the metadata document for the records that exist. CPU is in
-- thousandths of a core, memory in bytes (memoryGB × 2^30, truncated like
-- the container's limit), disk in GB.
ALTER TABLE sandboxes
    ADD COLUMN cpu_millis BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN memory_bytes BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN disk_gb BIGINT NOT NULL DEFAULT 0;

UPDATE sandboxes SET
    cpu_millis = round(COALESCE((metadata -> 'config' ->> 'cpu_cores')::double precision, 0) * 1000)::bigint,
    memory_bytes = trunc(COALESCE((metadata -> 'config' ->> 'memory_gb')::double precision, 0) * 1073741824)::bigint,
    disk_gb = COALESCE((metadata -> 'config' ->> 'disk_size_gb')::bigint, 0);

-- No index of their own: a host's sum reads its live records by status
-- (`sandboxes_live_status`), an account's by account
-- (`sandboxes_account_list_active`); more indexes would make every write
-- of a record (each status change) heavier.

-- SEC-16: an account's limits, set by an administrator; NULL is unlimited,
-- and an account without a row has no limits.
CREATE TABLE account_quotas (
    account_id   TEXT PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    sandboxes    BIGINT,
    cpu_millis   BIGINT,
    memory_bytes BIGINT,
    disk_gb      BIGINT,
    updated_at   TIMESTAMPTZ NOT NULL
);
