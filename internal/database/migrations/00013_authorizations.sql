-- +goose Up
-- Authorizations (contract §9): money held on the source until the payee captures it (all or
-- part, as entries of their own under the authorization's id), voids it, or it expires. pending:
-- claimed, not held yet; rejected: not enough available, nothing held.
CREATE TABLE authorizations (
    id                    text PRIMARY KEY,
    status                text NOT NULL CHECK (status IN ('pending', 'authorized', 'captured', 'voided', 'expired', 'rejected')),
    from_account_id       text NOT NULL REFERENCES accounts(id),
    to_account_id         text NOT NULL REFERENCES accounts(id),
    amount_minor          bigint NOT NULL CHECK (amount_minor > 0),
    amount_captured_minor bigint NOT NULL DEFAULT 0 CHECK (amount_captured_minor BETWEEN 0 AND amount_minor),
    currency              text NOT NULL,
    expires_at            timestamptz NOT NULL,
    workflow_id           text NOT NULL,
    description           text NOT NULL DEFAULT '',
    metadata              jsonb,
    created_at            timestamptz NOT NULL DEFAULT now(),
    captured_at           timestamptz,
    voided_at             timestamptz,
    expired_at            timestamptz,
    CHECK (from_account_id <> to_account_id),
    CHECK ((status = 'captured') = (captured_at IS NOT NULL) AND (status = 'captured') = (amount_captured_minor > 0)),
    CHECK ((status = 'voided') = (voided_at IS NOT NULL) AND (status = 'expired') = (expired_at IS NOT NULL))
);
CREATE INDEX authorizations_from ON authorizations (from_account_id, created_at);
CREATE INDEX authorizations_to ON authorizations (to_account_id, created_at);
CREATE INDEX authorizations_workflow ON authorizations (workflow_id);
CREATE INDEX authorizations_open ON authorizations (created_at) WHERE status IN ('pending', 'authorized');

-- One mechanism for money set aside: an authorization's hold is a row of holds, as a payout's
-- is, named by its id (the hold's id is its payout's or its authorization's).
ALTER TABLE holds
    DROP CONSTRAINT holds_pkey,
    ALTER COLUMN payout_id DROP NOT NULL,
    ADD CONSTRAINT holds_payout_id_key UNIQUE (payout_id),
    ADD COLUMN authorization_id text UNIQUE REFERENCES authorizations(id),
    ADD COLUMN id text GENERATED ALWAYS AS (COALESCE(payout_id, authorization_id)) STORED PRIMARY KEY,
    ADD CONSTRAINT hold_of_one CHECK (num_nonnulls(payout_id, authorization_id) = 1);

-- A capture's posting: its transfer row and entries are named by the authorization's id.
ALTER TABLE transfers DROP CONSTRAINT transfers_kind_check;
ALTER TABLE transfers ADD CONSTRAINT transfers_kind_check
    CHECK (kind IN ('transfer', 'payout', 'return', 'payin', 'refund', 'capture'));

-- +goose Down
-- Irreversible once an authorization is captured: the capture's rows fail the kind check.
ALTER TABLE transfers DROP CONSTRAINT transfers_kind_check;
ALTER TABLE transfers ADD CONSTRAINT transfers_kind_check CHECK (kind IN ('transfer', 'payout', 'return', 'payin', 'refund'));
DELETE FROM holds WHERE authorization_id IS NOT NULL;
ALTER TABLE holds DROP COLUMN id, DROP COLUMN authorization_id, DROP CONSTRAINT holds_payout_id_key;
ALTER TABLE holds ALTER COLUMN payout_id SET NOT NULL, ADD PRIMARY KEY (payout_id);
DROP TABLE authorizations;
