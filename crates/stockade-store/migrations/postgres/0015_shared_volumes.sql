-- Shared volumes: named volumes of an account that its sandboxes mount.
-- `server` is the Docker host holding the volume. A deleted volume keeps
-- its row (deleted_at set) so its id is never reused; its name is free
-- again at once.
CREATE TABLE shared_volumes (
    id          TEXT PRIMARY KEY NOT NULL,
    account_id  TEXT NOT NULL,
    name        TEXT NOT NULL,
    server      TEXT NOT NULL,
    size_gb     BIGINT,
    labels      TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    -- While MOVING: the host it is copied to and since when; after a
    -- move, the host whose copy is still to be removed.
    moving_to   TEXT,
    moving_since TIMESTAMPTZ,
    moved_from  TEXT,
    deleted_at  TIMESTAMPTZ
);
CREATE UNIQUE INDEX shared_volumes_account_name
    ON shared_volumes (account_id, name) WHERE deleted_at IS NULL;
CREATE INDEX shared_volumes_pending
    ON shared_volumes (status) WHERE deleted_at IS NULL
        AND (status <> 'READY' OR moved_from IS NOT NULL);

-- Which sandboxes mount which volume: written with the sandbox's record,
-- read through the sandbox's deleted_at (a deleted sandbox mounts nothing).
CREATE TABLE volume_mounts (
    volume_id   TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    path        TEXT NOT NULL,
    read_only   BOOLEAN NOT NULL,
    PRIMARY KEY (volume_id, sandbox_id, path)
);
CREATE INDEX volume_mounts_sandbox ON volume_mounts (sandbox_id);

-- What an account may keep of shared volumes: how many are not deleted,
-- and the total of their size_gb. NULL is unlimited, as for the other
-- limits of the row.
ALTER TABLE account_quotas ADD COLUMN volumes BIGINT;
ALTER TABLE account_quotas ADD COLUMN volume_gb BIGINT;
