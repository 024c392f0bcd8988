-- Releases: runs under the previous release and this one (expand only): new tables no earlier release reads or writes, and BRIN indexes on columns no statement of either release changes.
--
-- Reconciliation (docs/reconciliation.md): what each run compared and
-- what it found.
--
--   * reconciliation_run: one row a run, written with its items in one
--     transaction when it succeeds (or alone, as failed, with its error).
--     A run killed before that leaves nothing.
--   * reconciliation_item: one row a disagreement, under its key
--     (app.Mismatch.Key): the same disagreement found again by a later
--     run, over an overlapping window or the same one, is the same row
--     (upserted, never a second one: ux_reconciliation_item_key). It is
--     open until a run that compares its subject again does not find it.
--     judged_at is the Now of the last run that wrote it: a run writes an
--     item only if no run judged it at a later Now, so of two runs that
--     overlap the later one's judgement stands whichever commits last.
--     No foreign key to payment or refund: an item names them for the
--     operator, and its writes must never wait on theirs.
--   * reconciliation_finding: which run found which item, for GET
--     /reconciliation/runs/{id}/items.
--
-- The window's records are found by when they were reserved:
-- payment.created_at, refund.created_at and payment_transition.created_at,
-- each under a BRIN index. The rows are inserted in created_at order and
-- the column never changes, so a block range's summary is tight, the
-- index is a few pages for millions of rows, and its upkeep on insert
-- costs next to nothing: a B-tree would add an entry to every charge's
-- insert for a job that runs once a day. No HOT update is lost: an index
-- on a column an UPDATE does not change does not stop one.

-- +goose NO TRANSACTION

-- +goose Up
CREATE TABLE IF NOT EXISTS reconciliation_run (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    window_from   timestamptz NOT NULL,
    window_to     timestamptz NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz NOT NULL DEFAULT now(),
    status        text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
    error         text,
    movements     int         NOT NULL DEFAULT 0,
    payouts       int         NOT NULL DEFAULT 0,
    payments      int         NOT NULL DEFAULT 0,
    refunds       int         NOT NULL DEFAULT 0,
    matched       int         NOT NULL DEFAULT 0,
    found         int         NOT NULL DEFAULT 0,
    expected      int         NOT NULL DEFAULT 0,
    opened        int         NOT NULL DEFAULT 0,
    closed        int         NOT NULL DEFAULT 0,
    CONSTRAINT reconciliation_run_window CHECK (window_from < window_to),
    CONSTRAINT reconciliation_run_error_when_failed CHECK ((status = 'failed') = (error IS NOT NULL))
);

-- The last successful run (the metric payment_reconciliation_last_success_timestamp_seconds).
CREATE INDEX IF NOT EXISTS ix_reconciliation_run_succeeded
    ON reconciliation_run (finished_at) WHERE status = 'succeeded';

CREATE TABLE IF NOT EXISTS reconciliation_item (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key             text        NOT NULL CHECK (length(key) BETWEEN 1 AND 1100),
    class           text        NOT NULL CHECK (class IN ('missing_in_service', 'missing_at_provider', 'amount_differs',
                                    'currency_differs', 'status_differs', 'moved_twice', 'refunds_differ',
                                    'pending_too_long', 'hold_lapsing', 'batch_unbalanced', 'fee_differs')),
    subject         text        NOT NULL CHECK (subject IN ('payment', 'refund', 'payment_refunds', 'our_payment',
                                    'our_refund', 'movement', 'payout')),
    ref             text        NOT NULL,
    payment_id      bigint,
    refund_id       bigint,
    provider_id     text        NOT NULL,
    ours            numeric     NOT NULL,
    our_currency    text        NOT NULL,
    theirs          numeric     NOT NULL,
    their_currency  text        NOT NULL,
    detail          text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('open', 'closed')),
    first_run_id    bigint      NOT NULL REFERENCES reconciliation_run (id),
    last_run_id     bigint      NOT NULL REFERENCES reconciliation_run (id),
    closed_run_id   bigint      REFERENCES reconciliation_run (id),
    first_seen_at   timestamptz NOT NULL,
    last_seen_at    timestamptz NOT NULL,
    closed_at       timestamptz,
    judged_at       timestamptz NOT NULL,
    CONSTRAINT reconciliation_item_closed_when_closed
        CHECK ((status = 'closed') = (closed_at IS NOT NULL AND closed_run_id IS NOT NULL))
);

-- One item a disagreement, whatever runs find it.
CREATE UNIQUE INDEX IF NOT EXISTS ux_reconciliation_item_key ON reconciliation_item (key);

-- The open items, by class (GET /reconciliation/items, the metrics).
CREATE INDEX IF NOT EXISTS ix_reconciliation_item_open
    ON reconciliation_item (class, id) WHERE status = 'open';

CREATE TABLE IF NOT EXISTS reconciliation_finding (
    run_id   bigint NOT NULL REFERENCES reconciliation_run (id),
    item_id  bigint NOT NULL REFERENCES reconciliation_item (id),
    PRIMARY KEY (run_id, item_id)
);

-- Dropped first: a build that failed leaves an invalid index under the
-- name, which IF NOT EXISTS would keep.
DROP INDEX CONCURRENTLY IF EXISTS brin_payment_created_at;
CREATE INDEX CONCURRENTLY brin_payment_created_at ON payment USING brin (created_at);
DROP INDEX CONCURRENTLY IF EXISTS brin_refund_created_at;
CREATE INDEX CONCURRENTLY brin_refund_created_at ON refund USING brin (created_at);
DROP INDEX CONCURRENTLY IF EXISTS brin_payment_transition_created_at;
CREATE INDEX CONCURRENTLY brin_payment_transition_created_at ON payment_transition USING brin (created_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS brin_payment_transition_created_at;
DROP INDEX CONCURRENTLY IF EXISTS brin_refund_created_at;
DROP INDEX CONCURRENTLY IF EXISTS brin_payment_created_at;
DROP TABLE IF EXISTS reconciliation_finding;
DROP TABLE IF EXISTS reconciliation_item;
DROP TABLE IF EXISTS reconciliation_run;
