-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- Phase 1 of a charge is one autocommit statement (claimAndReserveSQL with
-- @atomic, internal/repository/charges.go): one round trip instead of
-- BEGIN, the statement and COMMIT. It may only commit the usual
-- answer, a claimed key with a PENDING payment to charge. For any other
-- answer (the key is held, the order does not match, a payment is in the
-- way) the statement calls this function, and its error rolls the whole
-- statement back, reservation and claim alike; the service then runs phase
-- 1 again inside a transaction, where those answers take further
-- statements before anything commits.
--
-- An error is the only way a single statement can undo what its own
-- data-modifying clauses wrote. SQLSTATE PC001 is in a class of this
-- service's own, so no other error is taken for it.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION charge_needs_transaction() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'PC001',
        MESSAGE = 'phase 1 rolled back: its answer needs a transaction';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS charge_needs_transaction();
