-- +goose Up
-- Lists of transfers and payouts, newest first, by keyset (created_at, id) (docs/contract.md §8):
-- an account's postings on either side, and its payouts, in that order, read from an index
-- without sorting. They replace the single-column indexes they start with.
CREATE INDEX transfers_from_newest ON transfers (from_account_id, created_at DESC, id DESC);
CREATE INDEX transfers_to_newest ON transfers (to_account_id, created_at DESC, id DESC);
DROP INDEX transfers_from, transfers_to;
-- Filtered by status, an account's list would otherwise read past every row of other statuses
-- (166 ms for a status an account of 200,000 transfers never had, docs/ledger.md).
CREATE INDEX transfers_from_status_newest ON transfers (from_account_id, status, created_at DESC, id DESC);
CREATE INDEX transfers_to_status_newest ON transfers (to_account_id, status, created_at DESC, id DESC);
CREATE INDEX payouts_account_newest ON payouts (account_id, created_at DESC, id DESC);
DROP INDEX payouts_account;

-- +goose Down
CREATE INDEX transfers_from ON transfers (from_account_id);
CREATE INDEX transfers_to ON transfers (to_account_id);
CREATE INDEX payouts_account ON payouts (account_id, created_at);
DROP INDEX transfers_from_newest, transfers_to_newest, transfers_from_status_newest, transfers_to_status_newest, payouts_account_newest;
