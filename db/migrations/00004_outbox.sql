-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- outbox_event: the transactional outbox (R-DIST-IDEM-1, R-DIST-IDEM-X2).
-- A payment's final status, its idempotency record and the event that
-- announces it are written in one transaction; the relay (internal/outbox)
-- publishes the rows to Kafka after the commit and then sets published_at.
-- Nothing is ever published inside the business transaction, and nothing
-- leaves the service without a row here.

-- +goose Up

-- The style guide gives no outbox table; the columns are ours:
--   * id: identity, the relay's publish order (oldest first) and the key the
--     retention job deletes published rows by, in batches.
--   * event_id: the event's eventId, UUID v7 (R-DIST-IDEM-1), generated once
--     when the row is written. A republished row (relay crash between
--     publish and marking) carries the same eventId, so consumers dedup it
--     in processed_event (R-DIST-IDEM-2).
--   * topic, message_key: where the relay sends the row and the Kafka key
--     (the order id, so one order's events stay on one partition, in order).
--   * event_type: "PaymentSucceeded.v1", also sent as a Kafka header.
--   * payload: the exact message value. json, not jsonb, so the bytes the
--     relay publishes are the bytes that were written.
--   * published_at: NULL until the broker acknowledged the row (acks=all).
CREATE TABLE outbox_event (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      uuid        NOT NULL UNIQUE,
    topic         text        NOT NULL CHECK (topic <> ''),
    message_key   text        NOT NULL,
    event_type    text        NOT NULL CHECK (event_type <> ''),
    payload       json        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    published_at  timestamptz NULL
);

-- The relay's only read: the oldest unpublished rows of its topic. Partial,
-- so it stays as small as the backlog while published rows wait for the
-- retention job.
CREATE INDEX ix_outbox_event_pending ON outbox_event (topic, id) WHERE published_at IS NULL;

-- Wake the relay when rows are committed: NOTIFY is delivered at commit (and
-- never for a rolled-back transaction), once per transaction for the same
-- channel and payload. A statement trigger rather than a pg_notify call in
-- the Go code, so every writer of the table wakes the relay. The relay
-- still polls slowly, because a notification is lost while no relay is
-- listening.
-- +goose StatementBegin
CREATE FUNCTION outbox_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_event_notify
    AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_notify();

-- +goose Down
DROP TABLE outbox_event;
DROP FUNCTION outbox_event_notify();
