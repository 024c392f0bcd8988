-- Releases: runs under the previous release and this one (expand only). The previous release never names recovery_point or the new indexes, and passes the CHECK (it writes charges' claims only, which may name their payment alone); its completer's list, which read ix_idempotency_record_abandoned, reads ix_idempotency_record_in_progress instead (its "locked_until < ..." implies that index's predicate: the same rows, in another order, sorted after); a rollback of the binary needs no rollback of this migration. A build of 00017 to 00023 (refunds, captures and voids before this migration) must not run beside it: its refund's or transition's claim, with no recovery point, fails the CHECK.
--
-- idempotency_record.recovery_point: one recovery point, which every
-- command writes (docs/decisions/0038).
--
-- Until now each command's reservation had a column of its own (payment_id
-- for a charge, refund_id for a refund, transition_id for a capture or a
-- void), and what the jobs share listed each: the completer's release
-- deleted a claim only with all three NULL, and each provider's event read
-- its own index. A command added later with a column of its own had to be
-- added to each, and one that was forgotten in the release's guard was a
-- claim released while its provider call may have moved money, with nothing
-- to tell its author. Now a claim names its command (00013) and its
-- reservation's id (recovery_point), and the command alone knows which
-- table that id is of (its Resume reads it). The shared statements read
-- command and recovery_point.
--
--   * bigint, NULL: a claim that reserved nothing (a rare answer, about to
--     be completed or rolled back) has none; neither does a record
--     answered without a claim (key_answer.sql).
--   * No foreign key: a key names one table, and the recovery point is of
--     the command's. A reservation row is deleted only by its command's
--     release, in the statement that deletes its claim (charge_release.sql,
--     refund_release.sql, transition_release.sql), and no other statement
--     deletes a payment, a refund or a transition; so a claim never outlives
--     its reservation.
--   * The old columns stay and are still written, each by its command, in
--     the same statements (expand): payment_id for the previous release's
--     jobs, which release or purge a claim with payment_id NULL whatever it
--     is (00017); refund_id and transition_id for a rollback of the binary
--     to a build of 00017 to 00023, whose completer resumes a refund, a
--     capture or a void by them. The contract step below drops them.
--
-- The backfill: every claim in progress gets its command's column as its
-- recovery point, coalesce(transition_id, refund_id, payment_id), the
-- command's own column first (a refund's and a transition's record name
-- their payment too). A completed record gets none: no statement reads
-- the recovery point of a completed record (the jobs and the provider's
-- events read claims in progress only), and its old columns stay until it
-- is purged. The claims in progress are few; the UPDATE reads them through
-- ix_idempotency_record_abandoned (locked_until IS NOT NULL: every claim
-- in progress and no other record, 00023), 1,000 a transaction, so no
-- transaction holds many of their row locks while claims run.
--
-- The previous release goes on writing charges' claims during the roll,
-- after the backfill, with payment_id and no recovery_point. The shared
-- statements take payment_id for the recovery point of a record that has
-- none (the completer's list reads coalesce(recovery_point, payment_id),
-- its release requires both NULL: internal/repository/retention.go), and
-- a charge's takeover of such a claim writes payment_id into it as its
-- recovery point (charge_claim.sql). The CHECK makes that exact:
--
--   * a claim in progress with a recovery point names a payment
--     (payment_id), so the previous release's completer and purge, which
--     release any claim with payment_id NULL, never release it. This is
--     00017's rule for refunds, for every command: a command with no
--     payment to name can run only once the previous release is this one
--     or later (docs/adding-a-command.md);
--   * a claim in progress that names a payment has a recovery point,
--     unless it is a charge's: so payment_id alone is a recovery point
--     only in the previous release's charges' claims, and a command whose
--     claim forgets recovery_point fails at its first INSERT.
--
-- It is added NOT VALID, so the ALTER holds its exclusive lock for the
-- catalog change only, and VALIDATE then scans the table under a lock that
-- lets claims go on (as 00017's). Completed records are outside it: their
-- links are not backfilled.
--
-- The indexes: one of every claim in progress,
-- ix_idempotency_record_in_progress, on (command, recovery_point) WHERE
-- locked_until IS NOT NULL, replaces four. It holds the rows the
-- completer's ix_idempotency_record_abandoned held (00023: every claim in
-- progress, by that predicate), and is keyed by what a provider's event
-- looks a claim up by, which the three indexes of 00023 were, a column
-- each. A claim enters three indexes: the primary key, created_at and this
-- one, where on 00023 a claim that reserved entered four (its column's
-- and the abandoned one); a fourth command's claim enters the same three
-- with nothing added for it (db/migrations/claim_index_test.go counts
-- them). Its readers:
--
--   * a provider's event finds its claim by "r.command = ... AND
--     r.recovery_point = <its row's id>" and names "r.locked_until IS NOT
--     NULL", the predicate, literally (provider_event_*.sql);
--   * the completer's list finds the claims of its commands by the first
--     column and sorts them by locked_until, which the abandoned index
--     gave in order: the claims in progress are few, and an index kept for
--     that order cost every claim an entry (docs/benchmarks.md measures
--     both);
--   * the unresolved saga steps' count names the predicate, as before.
--
-- No statement that finds a record by its key implies the predicate
-- (00023 says why that matters; TestKeyAddressedStatementsUseThePrimaryKey).
-- ix_idempotency_record_previous_charge holds the previous release's
-- charges' claims in progress (payment_id, no recovery_point), which a
-- provider's event about their payment finds by payment_id
-- (provider_event_charge.sql); no claim of this release enters it, and it
-- is empty once no replica of the previous release runs. The plan tests
-- hold each reader to its index (claim_index_plan_test.go).
--
-- Each new index is built CONCURRENTLY, dropped first so that a rerun after
-- a failed build builds it anew; the old indexes are dropped CONCURRENTLY
-- after both exist (a SHARE UPDATE EXCLUSIVE lock on the index alone), so
-- a reader always has one. A build of 00018 to 00023 reads the three for a
-- provider's event only, and would be slower there, not wrong.
--
-- Contract step, in the release after this one, once no release older than
-- this one can run (deploy/previous-release names this release or a later
-- one): the claims stop writing payment_id, refund_id and transition_id
-- (the clause claimed, the rare path's recovery point), the shared
-- statements stop reading payment_id (retention.go,
-- provider_event_charge.sql), and then a migration drops
-- ix_idempotency_record_previous_charge, this CHECK, 00017's, and the three
-- columns (docs/deploying.md).

-- +goose NO TRANSACTION

-- +goose Up
ALTER TABLE idempotency_record ADD COLUMN IF NOT EXISTS recovery_point bigint;

-- +goose StatementBegin
DO $$
DECLARE
    filled bigint;
BEGIN
    LOOP
        UPDATE idempotency_record
           SET recovery_point = coalesce(transition_id, refund_id, payment_id)
         WHERE (client_id, idempotency_key) IN (
                   SELECT client_id, idempotency_key
                     FROM idempotency_record
                    WHERE locked_until IS NOT NULL AND status = 'IN_PROGRESS'
                      AND recovery_point IS NULL
                      AND coalesce(transition_id, refund_id, payment_id) IS NOT NULL
                    LIMIT 1000)
           AND status = 'IN_PROGRESS' AND recovery_point IS NULL;
        GET DIAGNOSTICS filled = ROW_COUNT;
        COMMIT;
        EXIT WHEN filled = 0;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER TABLE idempotency_record
    DROP CONSTRAINT IF EXISTS idempotency_record_recovery_point_check,
    ADD CONSTRAINT idempotency_record_recovery_point_check
        CHECK (status <> 'IN_PROGRESS'
               OR ((recovery_point IS NULL OR payment_id IS NOT NULL)
                   AND (payment_id IS NULL OR recovery_point IS NOT NULL OR command = 'charge'))) NOT VALID;
ALTER TABLE idempotency_record VALIDATE CONSTRAINT idempotency_record_recovery_point_check;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_in_progress
    ON idempotency_record (command, recovery_point)
    WHERE locked_until IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_previous_charge;
CREATE INDEX CONCURRENTLY ix_idempotency_record_previous_charge
    ON idempotency_record (payment_id)
    WHERE status = 'IN_PROGRESS' AND command = 'charge' AND recovery_point IS NULL AND payment_id IS NOT NULL;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_in_progress;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;

-- +goose Down
-- The releases before this one find a claim's reservation by its command's
-- own column. A claim in progress whose recovery point is in none of them
-- (a command added since, which writes recovery_point only) would lose it:
-- refuse while one exists; let the completer finish it first.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM idempotency_record
                WHERE status = 'IN_PROGRESS' AND recovery_point IS NOT NULL
                  AND recovery_point IS DISTINCT FROM coalesce(transition_id, refund_id,
                                                               CASE WHEN command = 'charge' THEN payment_id END)) THEN
        RAISE EXCEPTION 'idempotency_record holds claims in progress whose recovery point no older column names; let the completer finish them before migrating down';
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;
CREATE INDEX CONCURRENTLY ix_idempotency_record_abandoned
    ON idempotency_record (locked_until)
    WHERE locked_until IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_payment_in_progress
    ON idempotency_record (payment_id)
    WHERE status = 'IN_PROGRESS' AND command = 'charge' AND payment_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_refund_in_progress
    ON idempotency_record (refund_id)
    WHERE status = 'IN_PROGRESS' AND refund_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_transition_in_progress
    ON idempotency_record (transition_id)
    WHERE status = 'IN_PROGRESS' AND transition_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_previous_charge;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_in_progress;
ALTER TABLE idempotency_record DROP CONSTRAINT IF EXISTS idempotency_record_recovery_point_check;
ALTER TABLE idempotency_record DROP COLUMN IF EXISTS recovery_point;
