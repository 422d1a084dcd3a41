-- +goose Up
-- Keys get an id to be listed and revoked by, scopes, their last use and their revocation
-- (contract §10). Keys issued before scopes keep what they could do: everything but approving
-- payouts, which did not exist. A revoked key stays, so that a list still shows it and when.
ALTER TABLE api_keys
    ADD COLUMN id text,
    ADD COLUMN scopes text[] NOT NULL DEFAULT '{read,transfers,payouts,webhooks,accounts}',
    ADD COLUMN last_used_at timestamptz,
    ADD COLUMN revoked_at timestamptz;
UPDATE api_keys SET id = 'key_' || encode(substr(key_hash, 1, 12), 'hex');
ALTER TABLE api_keys ALTER COLUMN id SET NOT NULL, ALTER COLUMN scopes DROP DEFAULT;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_id UNIQUE (id);
CREATE INDEX api_keys_owner ON api_keys (owner_id, created_at);

-- +goose Down
DROP INDEX api_keys_owner;
ALTER TABLE api_keys DROP COLUMN id, DROP COLUMN scopes, DROP COLUMN last_used_at, DROP COLUMN revoked_at;
