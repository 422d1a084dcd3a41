-- +goose Up
-- Claiming a transfer counts the transfers already made under its workflow ID (earlier uses of
-- the key), and reconcile checks them; both look transfers up by workflow ID.
CREATE INDEX transfers_workflow ON transfers (workflow_id);

-- +goose Down
DROP INDEX transfers_workflow;
