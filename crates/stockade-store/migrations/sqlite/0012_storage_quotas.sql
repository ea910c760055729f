-- What an account may keep in the object store: user snapshots that are
-- not deleted (how many, and the bytes of their archives) and uploads not
-- yet used (how many, and their bytes). NULL is unlimited, as for the
-- other limits of the row.
ALTER TABLE account_quotas ADD COLUMN snapshots INTEGER;
ALTER TABLE account_quotas ADD COLUMN snapshot_bytes INTEGER;
ALTER TABLE account_quotas ADD COLUMN uploads INTEGER;
ALTER TABLE account_quotas ADD COLUMN upload_bytes INTEGER;

-- The size of a snapshot's image archive in the object store, next to its
-- workspace archive's: the two together are what the snapshot counts for
-- in its account's quota. NULL on snapshots stored before (they count
-- their workspace only) and on fork snapshots, which keep no archive.
ALTER TABLE snapshots ADD COLUMN image_bytes INTEGER;
