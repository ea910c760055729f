-- SEC-15, SEC-16: each record's resources as columns, so that admission
-- control per Docker host and account quotas add them up in SQL. Written
-- from the record's spec on every insert and update; filled here from the
-- `config` of the metadata document for the records that exist. CPU is in
-- thousandths of a core, memory in bytes (memoryGB × 2^30, truncated like
-- the container's limit), disk in GB.
ALTER TABLE sandboxes ADD COLUMN cpu_millis INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN memory_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN disk_gb INTEGER NOT NULL DEFAULT 0;

UPDATE sandboxes SET
    cpu_millis = CAST(ROUND(COALESCE(json_extract(metadata, '$.config.cpu_cores'), 0) * 1000) AS INTEGER),
    memory_bytes = CAST(COALESCE(json_extract(metadata, '$.config.memory_gb'), 0) * 1073741824 AS INTEGER),
    disk_gb = CAST(COALESCE(json_extract(metadata, '$.config.disk_size_gb'), 0) AS INTEGER);

-- No index of their own: a host's sum reads its live records by status
-- (`sandboxes_live_status`), an account's by account
-- (`sandboxes_account_list_active`); more indexes would make every write
-- of a record (each status change) heavier.

-- SEC-16: an account's limits, set by an administrator; NULL is unlimited,
-- and an account without a row has no limits.
CREATE TABLE account_quotas (
    account_id   TEXT PRIMARY KEY NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    sandboxes    INTEGER,
    cpu_millis   INTEGER,
    memory_bytes INTEGER,
    disk_gb      INTEGER,
    updated_at   TEXT NOT NULL
);
