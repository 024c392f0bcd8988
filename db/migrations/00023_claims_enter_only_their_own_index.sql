-- Releases: runs under the previous release and this one (expand only). The previous release never names these three indexes and none of its statements can use them; a rollback of the binary needs no rollback of this migration.
--
-- A claim enters only the index that finds it by its own recovery point.
--
-- Every claim inserts an idempotency_record row IN_PROGRESS, and a B-tree
-- indexes NULLs: on 00018's and 00022's predicate (status =
-- 'IN_PROGRESS' alone) a charge's claim, whose refund_id and
-- transition_id are NULL, entered the refund and the transition indexes
-- too, and a refund's or a capture's claim, which names its payment
-- (00017, 00022), the payment one: six index entries per claim, where the
-- claim's readers need four (docs/benchmarks.md, "The hot path per
-- statement"). Each of the three indexes now holds only the claims whose
-- recovery point its column is:
--
--   * ix_idempotency_record_payment_in_progress: a charge's claim that
--     reserved its payment (command = 'charge', payment_id IS NOT NULL).
--     Its one reader, reportedChargeSQL (a provider's event about a
--     payment), joins on r.payment_id = p.id AND r.command = 'charge';
--   * ix_idempotency_record_refund_in_progress: refund_id IS NOT NULL.
--     Its reader, reportedRefundSQL, joins on r.refund_id = f.id;
--   * ix_idempotency_record_transition_in_progress: transition_id IS NOT
--     NULL. Its reader, reportedTransitionSQL, joins on
--     r.transition_id = t.id.
--
-- PostgreSQL uses a partial index only when the query implies its
-- predicate. It proves "col IS NOT NULL" from a strict operator on col, so
-- from each join's "col = <the other side's id>", and the command from
-- the literal 'charge', in custom and generic plans alike; the plan tests
-- (internal/repository/claim_index_plan_test.go) hold every reader to its
-- index on this schema. No other statement may use them: the jobs' lists
-- and the unresolved saga steps' count name none of these columns, and
-- read through ix_idempotency_record_abandoned (00005), which every claim
-- still enters (the completer lists the abandoned claims of every
-- command, and the previous release's completer too). It cannot be
-- narrowed, and merging it with another serves neither reader: the
-- completer reads every command's claims in locked_until order, an event
-- one claim by its recovery point. A charge's claim enters four indexes
-- (the primary key, created_at, abandoned, payment), a refund's, a
-- capture's or a void's four, a claim that reserved nothing three
-- (db/migrations/claim_index_test.go counts them).
--
-- Nothing HOT is lost: a record's completion already changed status and
-- locked_until, which the partial indexes read; the columns the new
-- predicates add (command and the recovery points) change on no update
-- that was HOT.
--
-- Each index is built anew under a name of its own, CONCURRENTLY (claims
-- go on), then the old one is dropped CONCURRENTLY and the new one takes
-- its name (a SHARE UPDATE EXCLUSIVE lock on the index alone): no
-- statement here takes a lock that stops a claim, and the new index is
-- valid before the old one goes, so a reader always has one of the two.
-- A rerun after a failed build drops only the new, invalid index and
-- builds it again while the old one still stands
-- (db/migrations/migrations_test.go); only a rerun after a failure
-- between a drop and its rename leaves that reader without its index
-- until the build ends (it then reads ix_idempotency_record_abandoned,
-- every claim in progress, and is slower, not wrong).

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_charge_claim;
CREATE INDEX CONCURRENTLY ix_idempotency_record_charge_claim
    ON idempotency_record (payment_id)
    WHERE status = 'IN_PROGRESS' AND command = 'charge' AND payment_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_charge_claim RENAME TO ix_idempotency_record_payment_in_progress;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_claim;
CREATE INDEX CONCURRENTLY ix_idempotency_record_refund_claim
    ON idempotency_record (refund_id)
    WHERE status = 'IN_PROGRESS' AND refund_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_refund_claim RENAME TO ix_idempotency_record_refund_in_progress;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_claim;
CREATE INDEX CONCURRENTLY ix_idempotency_record_transition_claim
    ON idempotency_record (transition_id)
    WHERE status = 'IN_PROGRESS' AND transition_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_transition_claim RENAME TO ix_idempotency_record_transition_in_progress;

-- +goose Down
-- 00018's and 00022's indexes again, the same way round.
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_any;
CREATE INDEX CONCURRENTLY ix_idempotency_record_transition_any
    ON idempotency_record (transition_id)
    WHERE status = 'IN_PROGRESS';
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_transition_any RENAME TO ix_idempotency_record_transition_in_progress;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_any;
CREATE INDEX CONCURRENTLY ix_idempotency_record_refund_any
    ON idempotency_record (refund_id)
    WHERE status = 'IN_PROGRESS';
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_refund_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_refund_any RENAME TO ix_idempotency_record_refund_in_progress;

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_any;
CREATE INDEX CONCURRENTLY ix_idempotency_record_payment_any
    ON idempotency_record (payment_id)
    WHERE status = 'IN_PROGRESS';
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_payment_in_progress;
ALTER INDEX IF EXISTS ix_idempotency_record_payment_any RENAME TO ix_idempotency_record_payment_in_progress;
