-- Releases: runs under the previous release and this one (expand only); it is what lets the previous release run beside refunds at all.
--
-- A refund's unfinished idempotency record names the payment it refunds
-- (docs/decisions/0022).
--
-- The previous release (deploy/previous-release: migrations up to 00012)
-- knows one command. Its completer lists every IN_PROGRESS record whose
-- lock has expired and deletes the ones with payment_id NULL as "a charge
-- that reserved nothing"; its TTL purge deletes them too (retention.go at
-- that release). A refund's record with payment_id NULL (all that 00016
-- asks of it) is one of those, so during a rolling deploy, while an old
-- replica is the jobs' leader (or an old `payment-service cleanup` runs,
-- which takes no leadership), an abandoned refund's record would be
-- deleted although its provider call may have moved money: the refund
-- would stay PENDING with its amount reserved, and nothing would ever
-- finish it.
--
-- So a refund's record names its payment in payment_id as soon as it
-- has a refund (the claim writes both, internal/repository/
-- command_clauses.go), and this CHECK makes that a rule of the table: a
-- record with a refund_id has a payment_id. The old statements then never
-- match it: their release and purge require payment_id NULL, and their
-- completer, which rebuilds a charge from the payment, finds that the
-- record's command hash is not the charge's and leaves it alone (logged as
-- a failure, every run, until no old replica leads; docs/deploying.md).
-- The current jobs read payment_id only in records named 'charge' (00013),
-- and release a record only with payment_id and refund_id both NULL, so
-- the extra link changes nothing for them.
--
--   * A CHECK, not a trigger that fills the column: the claim writes it in
--     the statement a reader sees, and the CHECK turns a statement that
--     forgets it into an error at once instead of a record the old jobs
--     would delete.
--   * First the records of refunds written before it (by a build of
--     refunds without this migration) get their payment; then the CHECK is
--     added NOT VALID, so every record written from then on is checked
--     while the ALTER holds its exclusive lock only for the catalog change;
--     then VALIDATE scans the table under a lock that lets claims go on.
--     So this runs outside a transaction. Each statement can run again: if
--     VALIDATE fails because such a build wrote a record in between, a
--     rerun fills it and completes the migration.
--   * The backfill reads idempotency_record once without an index
--     (refund_id has none, 00016); it writes only the refund records in
--     progress or completed, which are few next to the charges'.
--
-- Contract step, in a later release: once no release older than 00013 can
-- run (the release after this one), payment_id on a refund's record is no
-- longer needed; the CHECK can then be dropped and the claim stop writing
-- it, in that order.

-- +goose NO TRANSACTION
-- +goose Up
UPDATE idempotency_record r
   SET payment_id = f.payment_id
  FROM refund f
 WHERE f.id = r.refund_id AND r.payment_id IS NULL;
ALTER TABLE idempotency_record
    DROP CONSTRAINT IF EXISTS idempotency_record_refund_names_payment_check,
    ADD CONSTRAINT idempotency_record_refund_names_payment_check
        CHECK (refund_id IS NULL OR payment_id IS NOT NULL) NOT VALID;
ALTER TABLE idempotency_record VALIDATE CONSTRAINT idempotency_record_refund_names_payment_check;

-- +goose Down
-- The refund records keep their payment_id: harmless to every release
-- (see above), and the one thing that keeps the previous release's jobs off
-- them.
ALTER TABLE idempotency_record DROP CONSTRAINT IF EXISTS idempotency_record_refund_names_payment_check;
