-- Teams are managed by name: one team per name.
CREATE UNIQUE INDEX teams_name ON teams (name);

-- Metrics (API-13) count the records that are not deleted by status at every
-- scrape: an index-only count.
CREATE INDEX sandboxes_live_status ON sandboxes (status) WHERE deleted_at IS NULL;
