-- Releases: runs under the previous release and this one (expand only); its first ALTER rewrites payment under an exclusive lock, so on a large table it needs a quiet window (below).
--
-- What a charge costs the database, and what the purge leaves behind
-- (docs/decisions/0024).
--
-- A charge's PENDING to SUCCEEDED update of payment becomes a HOT update:
-- the new row version goes on the same page and no index gets a new
-- entry, where until now every charge added one to each of payment's four
-- indexes and left four dead ones for vacuum.
--
-- PostgreSQL makes an update HOT only if no column that an index reads
-- changes, and a partial index reads the columns of its predicate. The
-- third layer's index (00006) was UNIQUE (order_id) WHERE status IN
-- ('PENDING', 'SUCCEEDED'): every change of status, even one that keeps
-- the row inside the predicate, ruled HOT out. Its predicate now reads
-- is_live, a column PostgreSQL computes from status on every write
-- (GENERATED ... STORED): PENDING to SUCCEEDED leaves it true, so the
-- update is HOT whenever the page has room; PENDING to DECLINED or FAILED
-- turns it false and takes the row out of the index, as before. The rows
-- the index holds, and so the guarantee (one PENDING or SUCCEEDED payment
-- per order), are exactly the old index's: is_live is true exactly when
-- status IN ('PENDING', 'SUCCEEDED'). The index keeps its name, so every
-- reference to ux_payment_order_paid_once stays true.
--
-- fillfactor 90 leaves a tenth of each new page free: the update comes
-- milliseconds after the insert, when other charges have filled the page,
-- and a HOT update needs room on the row's own page.
--
-- Measured with `go run ./cmd/bench-api -scale` (docs/benchmarks.md,
-- "Cost as the tables grow"): the HOT share of payment's updates, the WAL
-- and the database CPU per charge, this schema against the one before it.
--
-- Autovacuum per table: the tables the retention purge trims are vacuumed
-- once 5 % of their rows are dead (or newly inserted), instead of the
-- default 20 %. processed_event keeps 7 days (PROCESSED_EVENT_RETENTION),
-- so a day's purge deletes a seventh of it, under 20 %: autovacuum did not
-- come after it (bench-api -scale's purge cycles), and the space those
-- rows held could not be reused until a second day's purge had added to
-- them, so the table held up to two days of dead rows besides its live
-- ones. idempotency_record (72 h) and outbox_event (24 h) are purged by a
-- third and more a day, which the default catches, but idempotency_record
-- also leaves a dead row version on every charge (its completion is not a
-- HOT update, below), a fifth of the table's worth between vacuums at the
-- default. A vacuum of a table whose untouched pages are all-visible reads
-- only the pages that changed, so vacuuming more often costs little more
-- in all. SET of a storage parameter takes a lock that lets reads and
-- writes go on.
--
-- Not done, because each would give up something:
--   * idempotency_record's IN_PROGRESS to COMPLETED update stays non-HOT:
--     the completer's index (00005) must tell IN_PROGRESS records apart,
--     and the update sets locked_until, the column it indexes, to NULL.
--   * outbox_event's published update stays non-HOT: the relay's index
--     (00008) holds exactly the unpublished rows and the purge's (00009)
--     the published ones, both by published_at.
--   * The unique keys (idempotency_record's, processed_event's, payment's
--     two) stay as they are: each guarantee is one unique index.
--
-- Which releases may run against it: expand only. The previous release
-- names its columns in every INSERT, so is_live is computed for its rows
-- too, and reads rows by column name, so it ignores is_live. Its reservation
-- inserts with ON CONFLICT DO NOTHING and no target, which every unique
-- index answers, this one included. A rollback of the binary needs no
-- rollback of this migration.
--
-- The cost of the migration itself: adding a stored generated column
-- rewrites the table and its indexes under an ACCESS EXCLUSIVE lock, so
-- charges wait for it: 15 to 24 s per million payments on the loaded
-- development machine (docs/benchmarks.md); on a table where that is too
-- long, run it when charges can wait that long. The index is then built CONCURRENTLY (charges go on), and
-- the old one is swapped for it in one statement, so there is no moment
-- without a third-layer index, whatever step a failure interrupts: a rerun
-- drops only the new, unswapped index (perhaps left invalid by a failed
-- build) and builds it again while the old one still stands.
-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE payment ADD COLUMN IF NOT EXISTS is_live boolean
    GENERATED ALWAYS AS (status IN ('PENDING', 'SUCCEEDED')) STORED;
DROP INDEX CONCURRENTLY IF EXISTS ux_payment_order_live;
CREATE UNIQUE INDEX CONCURRENTLY ux_payment_order_live
    ON payment (order_id)
    WHERE is_live;
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('ux_payment_order_live') IS NOT NULL THEN
        DROP INDEX IF EXISTS ux_payment_order_paid_once;
        ALTER INDEX ux_payment_order_live RENAME TO ux_payment_order_paid_once;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE payment SET (fillfactor = 90);
ALTER TABLE processed_event SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE idempotency_record SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE outbox_event SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05);
-- +goose Down
ALTER TABLE processed_event RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
ALTER TABLE idempotency_record RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
ALTER TABLE outbox_event RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor);
DROP INDEX CONCURRENTLY IF EXISTS ux_payment_order_status;
CREATE UNIQUE INDEX CONCURRENTLY ux_payment_order_status
    ON payment (order_id)
    WHERE status IN ('PENDING', 'SUCCEEDED');
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('ux_payment_order_status') IS NOT NULL THEN
        DROP INDEX IF EXISTS ux_payment_order_paid_once;
        ALTER INDEX ux_payment_order_status RENAME TO ux_payment_order_paid_once;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE payment DROP COLUMN IF EXISTS is_live;
ALTER TABLE payment RESET (fillfactor);
