-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- The retention purge deletes published outbox rows older than
-- OUTBOX_RETENTION, oldest first, in batches:
--   SELECT id FROM outbox_event WHERE published_at < $1
--    ORDER BY published_at LIMIT $2 FOR UPDATE SKIP LOCKED
-- Without an index on published_at every batch scanned and sorted the whole
-- table (a day or more of events). This index holds only published rows
-- (unpublished ones are never purged and have their own index, migration
-- 00008), in published_at order, so a batch reads just the rows it deletes.
-- TestOutboxScansUseTheirPartialIndexes shows the purge's plan uses it.
--
-- CONCURRENTLY, so building it blocks no insert; that needs the migration
-- to run outside a transaction.

-- A build CONCURRENTLY that fails leaves an invalid index behind, which
-- IF NOT EXISTS would keep: each index is dropped first, so a rerun builds
-- it anew.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_published_at;
CREATE INDEX CONCURRENTLY ix_outbox_event_published_at
    ON outbox_event (published_at) WHERE published_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_outbox_event_published_at;
