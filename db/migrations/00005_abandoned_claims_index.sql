-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- The completer job looks every minute for idempotency records
-- still IN_PROGRESS after their lock expired: requests whose client never
-- came back. Almost every record is COMPLETED, so a partial index over the
-- IN_PROGRESS ones stays tiny and spares a scan of the whole table.
--
-- CONCURRENTLY, so building it on a live table blocks no claim; that needs
-- the migration to run outside a transaction.

-- A build CONCURRENTLY that fails leaves an invalid index behind, and goose
-- runs the migration again on the next start: the index is dropped first,
-- so that rerun builds it anew instead of failing on the name
-- (db/migrations/migrations_test.go).

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;
CREATE INDEX CONCURRENTLY ix_idempotency_record_abandoned
    ON idempotency_record (locked_until)
    WHERE status = 'IN_PROGRESS';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;
