-- +goose Up
CREATE TABLE owners (
    id         text PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- API keys are high-entropy random strings, so a SHA-256 digest is a safe way to store them:
-- a leaked table does not reveal a usable key, and lookup stays one index probe.
CREATE TABLE api_keys (
    key_hash   bytea PRIMARY KEY,
    owner_id   text NOT NULL REFERENCES owners(id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE accounts (
    id            text PRIMARY KEY,
    owner_id      text NOT NULL REFERENCES owners(id),
    currency      text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    name          text NOT NULL DEFAULT '',
    kind          text NOT NULL CHECK (kind IN ('customer', 'funding')),
    balance_minor bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Last line of defence: the posting code checks funds first, this catches any bug in it.
    CONSTRAINT customer_balance_not_negative CHECK (kind = 'funding' OR balance_minor >= 0)
);
CREATE INDEX accounts_owner ON accounts (owner_id, created_at);
CREATE UNIQUE INDEX one_funding_account_per_currency ON accounts (currency) WHERE kind = 'funding';

CREATE TABLE transfers (
    id              text PRIMARY KEY,
    status          text NOT NULL CHECK (status IN ('pending', 'completed', 'rejected', 'failed')),
    from_account_id text NOT NULL REFERENCES accounts(id),
    to_account_id   text NOT NULL REFERENCES accounts(id),
    amount_minor    bigint NOT NULL CHECK (amount_minor > 0),
    currency        text NOT NULL,
    description     text NOT NULL DEFAULT '',
    workflow_id     text NOT NULL,
    failure_reason  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    CONSTRAINT distinct_accounts CHECK (from_account_id <> to_account_id)
);
CREATE INDEX transfers_from ON transfers (from_account_id);
CREATE INDEX transfers_to ON transfers (to_account_id);

-- Append-only. One entry per (transfer, account): a second posting of the same transfer cannot
-- insert its entries, whatever the code above it does.
CREATE TABLE entries (
    id                  bigserial PRIMARY KEY,
    transfer_id         text NOT NULL REFERENCES transfers(id),
    account_id          text NOT NULL REFERENCES accounts(id),
    amount_minor        bigint NOT NULL CHECK (amount_minor <> 0),
    balance_after_minor bigint NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (transfer_id, account_id)
);
CREATE INDEX entries_account ON entries (account_id, id DESC);

-- One row per idempotency scope (owner, method + route, key). Written before the operation
-- starts (so a concurrent duplicate can compare fingerprints while it runs) and completed with
-- the response in the same transaction as the operation's effect.
CREATE TABLE idempotency_records (
    owner_id     text NOT NULL,
    route        text NOT NULL,
    key          text NOT NULL,
    fingerprint  bytea NOT NULL,
    resource_id  text NOT NULL,
    status_code  int,
    content_type text,
    location     text,
    body         bytea,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    expires_at   timestamptz,
    PRIMARY KEY (owner_id, route, key)
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at) WHERE expires_at IS NOT NULL;

-- Funding accounts: the source of deposits, one per supported currency, allowed to go negative
-- so that every currency's balances sum to zero.
INSERT INTO owners (id, name) VALUES ('own_system', 'system');
INSERT INTO accounts (id, owner_id, currency, name, kind)
SELECT 'acc_funding_' || lower(c), 'own_system', c, c || ' funding', 'funding'
FROM unnest(ARRAY['USD', 'EUR', 'GBP', 'JPY', 'CHF', 'CAD']) AS c;

-- +goose Down
DROP TABLE idempotency_records, entries, transfers, accounts, api_keys, owners;
