-- +goose Up
-- No secret in plaintext (contract §10): a webhook endpoint's secret, and the stored answer that
-- showed it, are sealed with PAYMENTS_CODEC_KEYS (AES-256-GCM, internal/keyring). The key's id
-- is kept beside each sealed value, so that any key of the ring opens what it sealed. A secret
-- stored before this, in secret, is sealed by `payments migrate` once the keys are set; until
-- then it is read as it is.
ALTER TABLE webhook_endpoints
    ALTER COLUMN secret DROP NOT NULL,
    ADD COLUMN secret_key text,
    ADD COLUMN secret_sealed bytea,
    ADD CONSTRAINT one_secret CHECK ((secret IS NULL) <> (secret_sealed IS NULL) AND (secret_sealed IS NULL) = (secret_key IS NULL));
-- body_key: the key that sealed body; NULL when body is plain (every answer that shows no secret).
ALTER TABLE idempotency_records ADD COLUMN body_key text;

-- +goose Down
-- Irreversible once a secret is sealed: SET NOT NULL then fails, and the whole step rolls back
-- (goose runs it in one transaction), keeping the sealed secrets.
ALTER TABLE idempotency_records DROP COLUMN body_key;
ALTER TABLE webhook_endpoints DROP COLUMN secret_key, DROP COLUMN secret_sealed; -- and one_secret
ALTER TABLE webhook_endpoints ALTER COLUMN secret SET NOT NULL;
