-- Credentials that can be revoked: API tokens become a resource with an id
-- (what lists show and DELETE /api/v1/tokens/{id} takes), a name, an
-- optional expiry and when they were last used; dashboard sessions are rows
-- of kind 'session' whose secret only the session cookie holds, tied to the
-- API token they were opened with (`parent_id`). Accounts can be disabled.
ALTER TABLE accounts ADD COLUMN disabled_at TIMESTAMPTZ;

ALTER TABLE api_tokens ADD COLUMN id TEXT;
ALTER TABLE api_tokens ADD COLUMN name TEXT NOT NULL DEFAULT 'token';
ALTER TABLE api_tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'api';
ALTER TABLE api_tokens ADD COLUMN expires_at TIMESTAMPTZ;
ALTER TABLE api_tokens ADD COLUMN last_used_at TIMESTAMPTZ;
ALTER TABLE api_tokens ADD COLUMN parent_id TEXT;
-- Tokens made before have no id: 12 hex digits of their (random) hash.
UPDATE api_tokens SET id = substr(md5(token_hash || random()::text), 1, 12) WHERE id IS NULL;
CREATE UNIQUE INDEX api_tokens_id ON api_tokens (id);
CREATE INDEX api_tokens_parent ON api_tokens (parent_id) WHERE parent_id IS NOT NULL;
