-- Pause: when a sandbox was frozen (NULL unless it is PAUSED), and when it
-- was last resumed in its current run (its session counts from there; NULL
-- when it has not been resumed since it started).
ALTER TABLE sandboxes ADD COLUMN paused_at TEXT;
ALTER TABLE sandboxes ADD COLUMN resumed_at TEXT;
