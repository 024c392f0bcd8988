-- The completer job (issue 5) looks every minute for idempotency records
-- still IN_PROGRESS after their lock expired: requests whose client never
-- came back. Almost every record is COMPLETED, so a partial index over the
-- IN_PROGRESS ones stays tiny and spares a scan of the whole table.
--
-- CONCURRENTLY, so building it on a live table blocks no claim; that needs
-- the migration to run outside a transaction.

-- +goose NO TRANSACTION

-- +goose Up
CREATE INDEX CONCURRENTLY ix_idempotency_record_abandoned
    ON idempotency_record (locked_until)
    WHERE status = 'IN_PROGRESS';

-- +goose Down
DROP INDEX CONCURRENTLY ix_idempotency_record_abandoned;
