-- +goose Up
-- A bank event id is one event (docs/contract.md §6): the first body received under an id is
-- the event (bank_events.body). A later, different body under the same id has no effect; each
-- distinct one is kept here, with how many times it came, for operators.
CREATE TABLE bank_event_conflicts (
    event_id    text NOT NULL REFERENCES bank_events(id),
    body_sha256 bytea NOT NULL,
    body        bytea NOT NULL,
    copies      bigint NOT NULL DEFAULT 1 CHECK (copies > 0),
    first_at    timestamptz NOT NULL DEFAULT now(),
    last_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, body_sha256)
);

-- A signed callback that is no event (not JSON, ambiguous, no usable id or type) is kept in
-- bank_events too, with no effect, under the id 'malformed sha256:<hex of its body>' (no event
-- id has a space), type '' and outcome 'malformed: <reason>'.
ALTER TABLE bank_events ADD CONSTRAINT bank_events_malformed_keyed_by_body
    CHECK ((type = '') = (id LIKE 'malformed sha256:%'));

-- +goose Down
ALTER TABLE bank_events DROP CONSTRAINT bank_events_malformed_keyed_by_body;
DELETE FROM bank_events WHERE type = '';
DROP TABLE bank_event_conflicts;
