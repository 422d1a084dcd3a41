-- +goose Up
-- Events and webhooks (docs/contract.md §7, ADR 0009).

-- Every state change of a transfer, payout or payin appends its event in the transaction of the
-- change. seq is taken under the row locks of the owners who see it, held until that transaction
-- ends (ledger.flushEvents; ADR 0012), so within an owner's feed seq order is commit order: a
-- reader paging by seq never passes an event that commits later.
-- body is the event as the feed shows it and as webhooks deliver it, byte for byte.
CREATE SEQUENCE event_seq;
CREATE TABLE events (
    seq        bigint PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    type       text NOT NULL,
    object_id  text NOT NULL,
    body       bytea NOT NULL,
    created_at timestamptz NOT NULL,
    -- A change happens once: one event per object and type, whatever is retried.
    UNIQUE (object_id, type)
);

-- When events began: changes before it have none (reconcile checks the ones after).
CREATE TABLE events_start (at timestamptz NOT NULL);
INSERT INTO events_start VALUES (now());

-- Who sees an event: the owners of the accounts it touches (both sides of a transfer).
CREATE TABLE event_owners (
    owner_id  text NOT NULL REFERENCES owners(id),
    event_seq bigint NOT NULL REFERENCES events(seq),
    type      text NOT NULL,
    PRIMARY KEY (owner_id, event_seq)
);
CREATE INDEX event_owners_type ON event_owners (owner_id, type, event_seq);

-- A client's receiver. The secret signs deliveries, so it is kept as it is (a hash could not
-- sign); it is shown once, in the answer that created it.
CREATE TABLE webhook_endpoints (
    id          text PRIMARY KEY,
    owner_id    text NOT NULL REFERENCES owners(id),
    url         text NOT NULL,
    event_types text[] NOT NULL,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz
);
CREATE INDEX webhook_endpoints_owner ON webhook_endpoints (owner_id, created_at) WHERE deleted_at IS NULL;

-- One row per event an endpoint subscribes to, written with the event: the endpoint's outbox,
-- drained in seq order by its delivery workflow.
CREATE TABLE webhook_deliveries (
    endpoint_id  text NOT NULL REFERENCES webhook_endpoints(id),
    event_seq    bigint NOT NULL REFERENCES events(seq),
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'canceled')),
    attempts     int NOT NULL DEFAULT 0,
    last_status  int,
    last_error   text,
    delivered_at timestamptz,
    PRIMARY KEY (endpoint_id, event_seq)
);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, event_seq) WHERE status = 'pending';

-- +goose Down
DROP TABLE webhook_deliveries, webhook_endpoints, event_owners, events, events_start;
DROP SEQUENCE event_seq;
