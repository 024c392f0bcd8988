-- Releases: runs under the previous release and this one (expand only).
-- The previous release never reads or writes provider_event_contradiction
-- and never names the two new indexes; a rollback of the binary needs no
-- rollback of this migration.
--
-- Provider events (webhooks, docs/decisions/0021).
--
-- provider_event_contradiction keeps every provider event that contradicts
-- what the service recorded (a declined event for a SUCCEEDED payment,
-- another amount or currency): the service changes nothing for it, and an
-- operator reads it here (the alert PaymentProviderEventContradictions
-- points here). Deviations from the style guide's tables, with why:
--
--   * event_id text, not uuid: it is the provider's id (evt_...), as the
--     provider sent it, so an operator can find the event at the provider.
--     processed_event keys the same event by a name-based uuid of it
--     (app.eventUUID); this row names the original.
--   * event json, not jsonb: the delivery's body byte for byte, as signed,
--     so a disagreement about what was sent can be settled by checking
--     the signature again.
--   * UNIQUE (consumer_name, event_id): the row is written in the
--     transaction that records the event in processed_event, so there is
--     one per event already; the constraint says so to the reader, and
--     the insert's ON CONFLICT DO NOTHING makes it true even if it is not.
--   * No retention: a contradiction is money the two sides disagree on,
--     kept until an operator has settled it (and deletes it by hand).
--
-- ix_idempotency_record_payment_in_progress and
-- ix_idempotency_record_refund_in_progress find the claim whose recovery
-- point a payment or refund is, which an event about a PENDING object
-- records under (records are otherwise reached by their key only; see
-- 00016). Partial, on the predicate ix_idempotency_record_abandoned
-- already has (00005): only claims in progress are in them, so they stay
-- small, and phase 3's update, which already leaves that index, costs no
-- HOT update it had. Built CONCURRENTLY, outside a transaction, each
-- dropped first so that a rerun after a failed build builds it anew.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS provider_event_contradiction (
    id              bigserial PRIMARY KEY,
    consumer_name   text NOT NULL,
    event_id        text NOT NULL,
    event_type      text NOT NULL,
    provider_key    text NOT NULL,
    recorded_status text NOT NULL,
    reason          text NOT NULL,
    event           json NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT provider_event_contradiction_event_key UNIQUE (consumer_name, event_id)
);

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_payment_in_progress
    ON idempotency_record (payment_id)
    WHERE status = 'IN_PROGRESS';

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_refund_in_progress
    ON idempotency_record (refund_id)
    WHERE status = 'IN_PROGRESS';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
DROP TABLE IF EXISTS provider_event_contradiction;
