-- +goose Up
-- Refunds and metadata (docs/contract.md §8).
--
-- A refund is a posting of its own kind in transfers: money back from the refunded transfer's
-- destination to its source, linked to it by refund_of, so that invariants 1 to 5 hold it as
-- they hold every posting. The refunded transfer keeps the running total of its completed
-- refunds, updated under its row lock in each refund's posting; the CHECK is the last word on
-- "never more than the transfer's amount".
ALTER TABLE transfers DROP CONSTRAINT transfers_kind_check;
ALTER TABLE transfers ADD CONSTRAINT transfers_kind_check CHECK (kind IN ('transfer', 'payout', 'return', 'payin', 'refund'));
ALTER TABLE transfers ADD COLUMN refund_of text REFERENCES transfers(id);
ALTER TABLE transfers ADD CONSTRAINT refund_has_transfer CHECK ((kind = 'refund') = (refund_of IS NOT NULL));
ALTER TABLE transfers ADD COLUMN amount_refunded_minor bigint NOT NULL DEFAULT 0;
ALTER TABLE transfers ADD CONSTRAINT refunded_within_amount
    CHECK (amount_refunded_minor >= 0 AND amount_refunded_minor <= amount_minor);
CREATE INDEX transfers_refunds ON transfers (refund_of, created_at) WHERE refund_of IS NOT NULL;

-- Metadata: the client's string map, as given (NULL: none).
ALTER TABLE accounts ADD COLUMN metadata jsonb;
ALTER TABLE transfers ADD COLUMN metadata jsonb;
ALTER TABLE payouts ADD COLUMN metadata jsonb;

-- +goose Down
-- Refunds moved money: dropping them would unbalance the ledger, so the way down stops there.
-- +goose StatementBegin
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM transfers WHERE kind = 'refund') THEN
        RAISE EXCEPTION 'the ledger holds refunds; migrating below 00007 would drop money that moved';
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE payouts DROP COLUMN metadata;
ALTER TABLE transfers DROP COLUMN metadata;
ALTER TABLE accounts DROP COLUMN metadata;
ALTER TABLE transfers DROP COLUMN amount_refunded_minor;
ALTER TABLE transfers DROP COLUMN refund_of; -- and refund_has_transfer with it
ALTER TABLE transfers DROP CONSTRAINT transfers_kind_check;
ALTER TABLE transfers ADD CONSTRAINT transfers_kind_check CHECK (kind IN ('transfer', 'payout', 'return', 'payin'));
