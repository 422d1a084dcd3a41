-- +goose Up
-- Scheduled and recurring transfers (contract §9): a schedule whose occurrences are ordinary
-- transfers. pending: claimed, its run not started yet; active: its run waits for the next
-- occurrence; completed: its last occurrence has started; cancelled: no occurrence will start.
-- occurrences counts those started so far (each at most one transfer: transfers_occurrence).
CREATE TABLE scheduled_transfers (
    id              text PRIMARY KEY,
    status          text NOT NULL CHECK (status IN ('pending', 'active', 'completed', 'cancelled')),
    owner_id        text NOT NULL REFERENCES owners(id),
    from_account_id text NOT NULL REFERENCES accounts(id),
    to_account_id   text NOT NULL REFERENCES accounts(id),
    amount_minor    bigint NOT NULL CHECK (amount_minor > 0),
    currency        text NOT NULL,
    start_at        timestamptz NOT NULL,
    interval_text   text,
    interval_ms     bigint NOT NULL DEFAULT 0 CHECK (interval_ms = 0 OR interval_ms >= 1000),
    count           integer CHECK (count >= 1),
    occurrences     integer NOT NULL DEFAULT 0 CHECK (occurrences >= 0),
    next_run_at     timestamptz,
    workflow_id     text NOT NULL,
    description     text NOT NULL DEFAULT '',
    metadata        jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    cancelled_at    timestamptz,
    CHECK (from_account_id <> to_account_id),
    CHECK ((interval_ms = 0) = (interval_text IS NULL)),
    CHECK (interval_ms > 0 OR count IS NULL OR count = 1),
    CHECK (occurrences <= COALESCE(count, CASE WHEN interval_ms = 0 THEN 1 END, occurrences)),
    CHECK ((status = 'completed') = (completed_at IS NOT NULL) AND (status = 'cancelled') = (cancelled_at IS NOT NULL)),
    CHECK (status IN ('pending', 'active') OR next_run_at IS NULL)
);
CREATE INDEX scheduled_transfers_from ON scheduled_transfers (from_account_id, created_at);
CREATE INDEX scheduled_transfers_to ON scheduled_transfers (to_account_id, created_at);
CREATE INDEX scheduled_transfers_workflow ON scheduled_transfers (workflow_id);
CREATE INDEX scheduled_transfers_open ON scheduled_transfers (created_at) WHERE status IN ('pending', 'active');

-- An occurrence is an ordinary transfer that names its schedule and its number: at most one
-- transfer per occurrence, whatever fires it again.
ALTER TABLE transfers
    ADD COLUMN scheduled_transfer_id text REFERENCES scheduled_transfers(id),
    ADD COLUMN occurrence integer,
    ADD CONSTRAINT transfers_occurrence_named CHECK ((scheduled_transfer_id IS NULL) = (occurrence IS NULL));
CREATE UNIQUE INDEX transfers_occurrence ON transfers (scheduled_transfer_id, occurrence) WHERE scheduled_transfer_id IS NOT NULL;

-- +goose Down
DROP INDEX transfers_occurrence;
ALTER TABLE transfers DROP CONSTRAINT transfers_occurrence_named, DROP COLUMN occurrence, DROP COLUMN scheduled_transfer_id;
DROP TABLE scheduled_transfers;
