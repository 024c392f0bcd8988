-- Releases: runs under the previous release and this one (expand only: a
-- new table no earlier release reads or writes).
--
-- saga_step: the payment steps of an order saga, by their identity
-- (saga_id, step_name), the id the orchestrator knows (R-DIST-IDEM-1's
-- third transport). A step's money moves through the idempotency core like
-- an HTTP command's, under a key derived from this identity
-- (app.SagaStepScope); this table holds what the core's records do not:
--
--   * what the step is (kind) and what identifies its content
--     (content_hash: a charge's business fields, a compensation's
--     compensated step), so the same (saga_id, step_name) with other content
--     is a reuse, answered rejected before any other check, whichever of
--     the two came first;
--   * the tombstone (kind 'tombstone'): a compensation that came before its
--     step leaves one under the step's name, in one transaction with the
--     compensation's own answer, and the step that comes later moves no
--     money (the first insert wins: ON CONFLICT, never check-then-act);
--   * a compensation's refund, fixed once (payment_id, refund_amount: what
--     the step charged less what was already refunded), so that a re-sent
--     compensation asks for the very refund the first one did;
--   * a compensation waiting for its step's unknown outcome to settle
--     (waiting): the completer's run takes it up, so the consumer never
--     blocks its partition on a lookup, a webhook or a completer run.
--
-- Rows are kept as long as the idempotency records of their steps
-- (IDEMPOTENCY_TTL, created_at), and purged with them.
-- +goose Up
CREATE TABLE saga_step (
    saga_id        uuid        NOT NULL,
    step_name      text        NOT NULL CHECK (length(step_name) BETWEEN 1 AND 100),
    kind           text        NOT NULL CHECK (kind IN ('charge', 'compensation', 'tombstone')),
    content_hash   text        NOT NULL,
    compensates    text        CHECK (length(compensates) BETWEEN 1 AND 100),
    payment_id     bigint      REFERENCES payment (id),
    refund_amount  numeric(19, 4) CHECK (refund_amount >= 0),
    waiting        boolean     NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step_name),
    CONSTRAINT saga_step_compensation_names_its_step
        CHECK ((kind = 'compensation') = (compensates IS NOT NULL))
);

-- The completer's list of compensations waiting for their step.
CREATE INDEX ix_saga_step_waiting ON saga_step (updated_at) WHERE waiting;

-- The TTL purge deletes by age.
CREATE INDEX ix_saga_step_created_at ON saga_step (created_at);

-- +goose Down
DROP TABLE saga_step;
