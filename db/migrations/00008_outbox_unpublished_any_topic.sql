-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- The relay reads the oldest unpublished rows of every topic, and publishes
-- each to the topic stored in it. A relay that reads only the configured
-- PAYMENT_EVENTS_TOPIC's rows (WHERE topic = $1) strands every unpublished
-- row of the old topic for ever when the variable changes, or during a
-- rolling rename: lost events, which retention never deletes either.
--
-- Its index follows the query: the unpublished rows by id, whatever the
-- topic. Partial, so it stays as small as the backlog. Built CONCURRENTLY
-- (no lock against the transactions that insert events), hence outside a
-- transaction; the old (topic, id) index goes after the new one exists. A
-- relay of the previous release, still filtering by topic during the
-- rollout, is served by the new index too.

-- A build CONCURRENTLY that fails leaves an invalid index behind, which
-- IF NOT EXISTS would keep: each index is dropped first, so a rerun builds
-- it anew.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_unpublished;
CREATE INDEX CONCURRENTLY ix_outbox_event_unpublished
    ON outbox_event (id) WHERE published_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_pending;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_pending;
CREATE INDEX CONCURRENTLY ix_outbox_event_pending
    ON outbox_event (topic, id) WHERE published_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_unpublished;
