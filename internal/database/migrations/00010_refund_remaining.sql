-- +goose Up
-- A refund of "all that remains" (its amount left out, docs/contract.md §8) takes what remains
-- when it posts, under the refunded transfer's row lock, not what remained when it was claimed:
-- otherwise two refunds sent together, one of part and one of the rest, could refuse the rest
-- for good while it was still there. Until it posts, such a refund's amount_minor is what
-- remained at its claim (the amount a worker that does not know this column posts); the
-- posting sets it to what it takes.
ALTER TABLE transfers ADD COLUMN refund_remaining boolean NOT NULL DEFAULT false;
ALTER TABLE transfers ADD CONSTRAINT refund_remaining_is_a_refund CHECK (NOT refund_remaining OR kind = 'refund');

-- +goose Down
ALTER TABLE transfers DROP COLUMN refund_remaining; -- and its CHECK with it
