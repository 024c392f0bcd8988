-- Releases: runs under the previous release and this one (expand only).
--
-- The function every command's phase 1 calls to roll its one statement
-- back when its answer needs a transaction (00012) is named for what it
-- serves: the claim of any command, not only a charge's.
-- claim_needs_transaction() is charge_needs_transaction() under that name;
-- this release's statements call it. The old name stays: the previous
-- release's statements call it, and a later release drops it once no
-- release before this one runs (the contract step, docs/deploying.md).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION claim_needs_transaction() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'PC001',
        MESSAGE = 'phase 1 rolled back: its answer needs a transaction';
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS claim_needs_transaction();
