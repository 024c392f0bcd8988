-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- processed_event keyed by (event_id, consumer_name), not event_id alone.
--
-- R-DIST-IDEM-2 is each receiver's record of what *it* processed. The style
-- guide's table keys it by event_id and keeps consumer_name as a plain
-- column, which makes the record global: a second consumer of the same
-- events (the projection rebuilt under a new consumer group, or another
-- projection) found every event it had never applied already "processed"
-- and skipped it, so the rebuilt projection lost those orders and their
-- charges got 422. With the pair as the key, each consumer dedups its own
-- deliveries exactly as before (the guide's meaning for one consumer is
-- unchanged: one row, and one application, per event), and consumers no
-- longer see each other's rows.
--
-- Every existing row is kept: it was written by the consumer it names, and
-- that consumer must go on skipping those events after the deploy.
--
-- The new unique index is built CONCURRENTLY, so a large table is not
-- locked against the consumer while it builds; the swap of the primary key
-- is then one short ALTER. That needs the migration to run outside a
-- transaction. A consumer of the previous release still running during the
-- rollout fails its batches (its ON CONFLICT (event_id) matches no unique
-- index any more) and retries them until it is replaced; nothing is lost.

-- A build CONCURRENTLY that fails leaves an invalid index behind, which
-- IF NOT EXISTS would keep: each index is dropped first, so a rerun builds
-- it anew.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS processed_event_event_consumer;
CREATE UNIQUE INDEX CONCURRENTLY processed_event_event_consumer
    ON processed_event (event_id, consumer_name);
ALTER TABLE processed_event
    DROP CONSTRAINT processed_event_pkey,
    ADD CONSTRAINT processed_event_pkey PRIMARY KEY USING INDEX processed_event_event_consumer;

-- +goose Down
-- The old key allows one row per event: keep each event's oldest row (the
-- first consumer that processed it) and drop the others.
DELETE FROM processed_event p
 USING processed_event older
 WHERE older.event_id = p.event_id
   AND (older.processed_at, older.consumer_name) < (p.processed_at, p.consumer_name);
ALTER TABLE processed_event DROP CONSTRAINT processed_event_pkey;
ALTER TABLE processed_event ADD CONSTRAINT processed_event_pkey PRIMARY KEY (event_id);
