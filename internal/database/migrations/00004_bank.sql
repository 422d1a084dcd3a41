-- +goose Up
-- Money in and out through a bank (docs/contract.md §6): holds, payouts, payins, the bank's
-- settlement accounts and its callbacks.

-- An account's held_minor is the sum of its open holds; available = balance_minor - held_minor,
-- never negative for a customer. account_number is what the bank quotes for credits into it.
CREATE SEQUENCE account_numbers START 1;
ALTER TABLE accounts
    ADD COLUMN held_minor bigint NOT NULL DEFAULT 0 CHECK (held_minor >= 0),
    ADD COLUMN account_number text UNIQUE;
UPDATE accounts SET account_number = '4' || lpad(nextval('account_numbers')::text, 11, '0') WHERE kind = 'customer';
ALTER TABLE accounts ALTER COLUMN account_number SET DEFAULT '4' || lpad(nextval('account_numbers')::text, 11, '0');
ALTER TABLE accounts DROP CONSTRAINT accounts_kind_check;
ALTER TABLE accounts ADD CONSTRAINT accounts_kind_check CHECK (kind IN ('customer', 'funding', 'settlement'));
ALTER TABLE accounts DROP CONSTRAINT customer_balance_not_negative;
ALTER TABLE accounts ADD CONSTRAINT customer_available_not_negative
    CHECK (kind <> 'customer' OR (balance_minor >= 0 AND balance_minor - held_minor >= 0));

-- The bank's settlement account of each currency: credited by payouts paid, debited by payins
-- and returns. Like the funding accounts, the system's own, allowed any sign.
INSERT INTO accounts (id, owner_id, currency, name, kind, account_number)
SELECT 'acc_settlement_' || lower(currency), 'own_system', currency, currency || ' bank settlement', 'settlement', NULL
FROM accounts WHERE kind = 'funding';
CREATE UNIQUE INDEX one_settlement_account_per_currency ON accounts (currency) WHERE kind = 'settlement';

-- What a posting is: a transfer (deposits included), a payout paid, a payout returned, a payin.
ALTER TABLE transfers ADD COLUMN kind text NOT NULL DEFAULT 'transfer'
    CHECK (kind IN ('transfer', 'payout', 'return', 'payin'));

CREATE TABLE payouts (
    id                         text PRIMARY KEY,
    status                     text NOT NULL CHECK (status IN ('processing', 'paid', 'failed', 'returned')),
    account_id                 text NOT NULL REFERENCES accounts(id),
    amount_minor               bigint NOT NULL CHECK (amount_minor > 0),
    currency                   text NOT NULL,
    destination_account_number text NOT NULL,
    destination_bank_code      text NOT NULL,
    description                text NOT NULL DEFAULT '',
    workflow_id                text NOT NULL,
    bank_payment_id            text UNIQUE,
    failure_reason             text,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    paid_at                    timestamptz,
    failed_at                  timestamptz,
    returned_at                timestamptz
);
CREATE INDEX payouts_account ON payouts (account_id, created_at);
CREATE INDEX payouts_workflow ON payouts (workflow_id);
CREATE INDEX payouts_processing ON payouts (created_at) WHERE status = 'processing';

-- One hold per payout, ended exactly once: posted (the payout was paid) or released (it failed).
CREATE TABLE holds (
    payout_id    text PRIMARY KEY REFERENCES payouts(id),
    account_id   text NOT NULL REFERENCES accounts(id),
    amount_minor bigint NOT NULL CHECK (amount_minor > 0),
    status       text NOT NULL CHECK (status IN ('open', 'posted', 'released')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    CHECK ((status = 'open') = (ended_at IS NULL))
);
CREATE INDEX holds_open ON holds (account_id) WHERE status = 'open';

-- Every verified bank callback, once per bank event id: the record that makes a duplicate
-- harmless, and what operators read when an event matched nothing.
CREATE TABLE bank_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    body        bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    outcome     text NOT NULL DEFAULT 'received'
);

-- Money that arrived through the bank: credited to the account its number names, or, when no
-- account has that number (or not in that currency), kept unmatched for operators.
CREATE TABLE payins (
    id             text PRIMARY KEY,
    bank_event_id  text NOT NULL UNIQUE,
    account_number text NOT NULL,
    account_id     text REFERENCES accounts(id),
    amount_minor   bigint NOT NULL CHECK (amount_minor > 0),
    currency       text NOT NULL,
    reference      text NOT NULL DEFAULT '',
    status         text NOT NULL CHECK (status IN ('credited', 'unmatched')),
    transfer_id    text REFERENCES transfers(id),
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE payins, bank_events, holds, payouts;
ALTER TABLE transfers DROP COLUMN kind;
DELETE FROM accounts WHERE kind = 'settlement';
ALTER TABLE accounts DROP CONSTRAINT customer_available_not_negative;
ALTER TABLE accounts ADD CONSTRAINT customer_balance_not_negative CHECK (kind = 'funding' OR balance_minor >= 0);
ALTER TABLE accounts DROP CONSTRAINT accounts_kind_check;
ALTER TABLE accounts ADD CONSTRAINT accounts_kind_check CHECK (kind IN ('customer', 'funding'));
ALTER TABLE accounts DROP COLUMN held_minor, DROP COLUMN account_number;
DROP SEQUENCE account_numbers;
