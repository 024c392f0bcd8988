-- Releases: runs under the previous release and this one (expand only).
--
-- A payment the provider refused for good, with no charge under its key,
-- ends as FAILED (without it such a payment stays PENDING for ever, its
-- key answering 503 outcome-unknown and its order blocked). FAILED is
-- final like DECLINED and, like it, not live: the third layer's index
-- (00006) counts PENDING and SUCCEEDED only, so the order is free for a new
-- attempt.
--
-- Expand only: the constraint accepts one more value. The release before
-- this one runs against it unharmed: it never writes FAILED, and where it
-- reads a FAILED payment (a new key for the same external payment) it takes
-- it for one still in flight and answers 409 request-in-progress, which a
-- client retries until a current replica answers.
--
-- The constraint is replaced NOT VALID and validated in a statement of its
-- own: the ALTER holds its exclusive lock only for the catalog change, and
-- VALIDATE scans the table under a lock that lets charges go on. So this
-- migration runs outside a transaction; each statement commits on its own,
-- and a rerun after a failure in between finds the new constraint and
-- validates it.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_status_check,
    ADD CONSTRAINT payment_status_check
        CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')) NOT VALID;
ALTER TABLE payment VALIDATE CONSTRAINT payment_status_check;

-- +goose Down
ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_status_check,
    ADD CONSTRAINT payment_status_check
        CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED')) NOT VALID;
ALTER TABLE payment VALIDATE CONSTRAINT payment_status_check;
