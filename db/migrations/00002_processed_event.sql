-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- processed_event: the receiver-side dedup table of R-DIST-IDEM-2, exactly
-- as the style guide gives it. A Kafka consumer inserts an event's id with
-- INSERT ... ON CONFLICT DO NOTHING in the same transaction as the business
-- update; the insert's result decides whether the event is applied.

-- +goose Up
CREATE TABLE processed_event (
    event_id      uuid PRIMARY KEY,
    consumer_name text NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now()
);
-- Retention (R-DIST-IDEM-5's cleanup job) deletes by age.
CREATE INDEX ix_processed_event_processed_at ON processed_event (processed_at);

-- +goose Down
DROP TABLE processed_event;
