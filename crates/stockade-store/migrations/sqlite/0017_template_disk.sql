-- A template's default disk size (GB) for its sandboxes and builds.
ALTER TABLE templates ADD COLUMN disk_size_gb INTEGER;
