-- +goose Up
-- Approvals (contract §9): a payout at or above the threshold waits, its money held, in
-- pending_approval until a second key approves it (on to the bank) or rejects it, or until
-- approval_due_at fails it. created_by_key is the key that asked for it, which cannot approve it
-- ('' for payouts from before approvals).
ALTER TABLE payouts
    ADD COLUMN created_by_key  text NOT NULL DEFAULT '',
    ADD COLUMN approval_due_at timestamptz,
    ADD COLUMN approved_by     text,
    ADD COLUMN rejected_by     text,
    DROP CONSTRAINT payouts_status_check,
    ADD CONSTRAINT payouts_status_check CHECK (status IN ('processing', 'pending_approval', 'paid', 'failed', 'returned')),
    ADD CONSTRAINT payouts_decided_once CHECK (approved_by IS NULL OR rejected_by IS NULL),
    ADD CONSTRAINT payouts_decided_by_another CHECK (approved_by IS DISTINCT FROM created_by_key AND rejected_by IS DISTINCT FROM created_by_key),
    ADD CONSTRAINT payouts_decided_if_asked CHECK (approval_due_at IS NOT NULL OR (approved_by IS NULL AND rejected_by IS NULL)),
    ADD CONSTRAINT payouts_waits_if_asked CHECK (status <> 'pending_approval' OR approval_due_at IS NOT NULL);
DROP INDEX payouts_processing;
CREATE INDEX payouts_processing ON payouts (created_at) WHERE status IN ('processing', 'pending_approval');

-- +goose Down
DROP INDEX payouts_processing;
CREATE INDEX payouts_processing ON payouts (created_at) WHERE status = 'processing';
UPDATE payouts SET status = 'processing' WHERE status = 'pending_approval';
ALTER TABLE payouts
    DROP CONSTRAINT payouts_waits_if_asked,
    DROP CONSTRAINT payouts_decided_if_asked,
    DROP CONSTRAINT payouts_decided_by_another,
    DROP CONSTRAINT payouts_decided_once,
    DROP CONSTRAINT payouts_status_check,
    ADD CONSTRAINT payouts_status_check CHECK (status IN ('processing', 'paid', 'failed', 'returned')),
    DROP COLUMN rejected_by,
    DROP COLUMN approved_by,
    DROP COLUMN approval_due_at,
    DROP COLUMN created_by_key;
