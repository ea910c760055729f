-- The environment variables of the sandbox a snapshot was taken from, as a
-- JSON object. Snapshot images are committed with those values blanked (an
-- image is no place for API keys); a sandbox made from the snapshot gets
-- them from here. NULL on snapshots taken before: their images carry them.
ALTER TABLE snapshots ADD COLUMN environment_vars TEXT;
