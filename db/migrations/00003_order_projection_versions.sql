-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- order_projection versions: what makes the order-projection consumer's
-- upsert safe against out-of-order delivery (R-DIST-IDEM-2 deals with
-- duplicates; this deals with reordering).
--
-- Kafka keeps order only within a partition, and even there a producer
-- retry, a re-keyed topic or a replayed DLT record can deliver an older
-- event after a newer one. Each row therefore remembers the version of the
-- event it was last written from: the event's occurred_at, with its event_id
-- (UUID v7, R-DIST-IDEM-1) as the tie-break when two events carry the same
-- instant. The consumer's upsert is
--   INSERT ... ON CONFLICT (order_id) DO UPDATE ... WHERE
--     stored version IS NULL OR stored version < incoming version
-- so an older event leaves a newer row as it is, whatever order the events
-- arrive in and however often.
--
-- Both columns are NULL for rows that no event wrote (seeded by the dev
-- stack or by tests); any event supersedes such a row. occurred_at is stored
-- with PostgreSQL's microsecond precision; the consumer truncates event
-- times to microseconds before comparing, so Go and SQL agree on the order.

-- +goose Up
ALTER TABLE order_projection
    ADD COLUMN last_event_at timestamptz,
    ADD COLUMN last_event_id uuid,
    ADD CONSTRAINT order_projection_version_complete
        CHECK ((last_event_at IS NULL) = (last_event_id IS NULL));

-- +goose Down
ALTER TABLE order_projection
    DROP CONSTRAINT order_projection_version_complete,
    DROP COLUMN last_event_id,
    DROP COLUMN last_event_at;
