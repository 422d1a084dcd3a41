-- +goose Up
-- A transfer marked failed names the workflow runs that gave up on it. Such a run's posting, if
-- it is still going (an operator terminated the run while its posting waited on a lock), must
-- not post it afterwards: the client was told that no money moved. A new run of the same
-- workflow ID (the same request again, `payments rerun failed`, a UI Reset) still may.
ALTER TABLE transfers ADD COLUMN failed_runs text[] NOT NULL DEFAULT '{}';

-- The recovery Schedule and reconcile look for transfers left pending; few are at any time.
CREATE INDEX transfers_pending ON transfers (created_at) WHERE status = 'pending';

-- +goose Down
DROP INDEX transfers_pending;
ALTER TABLE transfers DROP COLUMN failed_runs;
