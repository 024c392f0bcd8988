-- Releases: runs under the previous release and this one (expand only). The previous release never names these four indexes; its completer's list and release may still read ix_idempotency_record_abandoned (their "locked_until < ..." implies the new predicate), and none of its other statements can use any of them; a rollback of the binary needs no rollback of this migration.
--
-- A claim enters only the index that finds it by its own recovery point,
-- and a statement that finds a record by its key reads the primary key.
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
-- and the unresolved saga steps' count name none of these columns.
--
-- The completer's index, ix_idempotency_record_abandoned (00005), keeps
-- every claim in progress, by locked_until: the completer lists the
-- abandoned claims of every command in that order (and the previous
-- release's completer too), so it cannot be narrowed to a command, and
-- merging it with another serves neither reader. Its predicate becomes
-- "locked_until IS NOT NULL" instead of "status = 'IN_PROGRESS'". The
-- rows are the same: 00001's CHECK gives every IN_PROGRESS record its
-- locked_until, and every completion (this release's and the previous
-- one's) sets it NULL. What changes is which statements may read it. On
-- the status predicate, every statement that finds a record by its key
-- and "status = 'IN_PROGRESS'" implied it: each command's record and
-- release, the lock check, the lock's early expiry. After an analyze that
-- found few claims in progress (a handful at 16 clients), the planner
-- took a scan of that whole index, which it then thinks a page, over the
-- primary key, in custom and generic plans alike; and the index holds,
-- besides the claims in progress, an entry for every claim completed
-- since the last vacuum, so the read grew with the load
-- (docs/benchmarks.md, "The hot path per statement"). Those statements
-- name lock_token, not locked_until, and now find their record by the
-- primary key; the index's readers name locked_until: the completer's
-- list "locked_until < ...", which implies the predicate in generic plans
-- too (its status is no longer needed for it), and the unresolved saga
-- steps' count "locked_until IS NOT NULL". The completer's release, which
-- finds its record by the key, compares coalesce(locked_until, ...) so
-- that it implies nothing of it (internal/repository/retention.go).
-- TestKeyAddressedStatementsUseThePrimaryKey (claim_index_plan_test.go)
-- holds every statement that addresses a record by its key to the primary
-- key.
--
-- A charge's claim enters four indexes (the primary key, created_at,
-- abandoned, payment), a refund's, a capture's or a void's four, a claim
-- that reserved nothing three (db/migrations/claim_index_test.go counts
-- them).
--
-- Nothing HOT is lost: a record's completion already changed status and
-- locked_until, which the partial indexes read; the columns the new
-- predicates add (command and the recovery points) change on no update
-- that was HOT, and the abandoned index's predicate reads only the column
-- it indexes.
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
-- every claim in progress, or, for that index's own rebuild, the
-- completer's list another index, and is slower, not wrong).

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

DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned_lock;
CREATE INDEX CONCURRENTLY ix_idempotency_record_abandoned_lock
    ON idempotency_record (locked_until)
    WHERE locked_until IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;
ALTER INDEX IF EXISTS ix_idempotency_record_abandoned_lock RENAME TO ix_idempotency_record_abandoned;

-- +goose Down
-- 00005's abandoned index, 00018's and 00022's indexes again, the same way round.
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned_status;
CREATE INDEX CONCURRENTLY ix_idempotency_record_abandoned_status
    ON idempotency_record (locked_until)
    WHERE status = 'IN_PROGRESS';
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_abandoned;
ALTER INDEX IF EXISTS ix_idempotency_record_abandoned_status RENAME TO ix_idempotency_record_abandoned;

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
