-- SCALE-7: leases that one server instance holds at a time, e.g.
-- `background` (the deployment-wide background work). `holder` is the
-- process holding it until `expires_at` (RFC 3339 text like the other
-- timestamps); it renews before then, and once that time has passed any
-- instance may take the lease over.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY NOT NULL,
    holder     TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
