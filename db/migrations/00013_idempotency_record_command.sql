-- Releases: runs under the previous release and this one (expand only); with 00017, applied in the same rollout, the previous release's jobs leave other commands' records alone.
--
-- idempotency_record.command: which command a record belongs to.
--
-- The style guide's table has no such column: its key, command hash and
-- response are enough while one command exists. This service's jobs read
-- more than that. A completer and a TTL purge that know only the charge
-- take an IN_PROGRESS record with payment_id NULL for "a charge that
-- reserved nothing" and delete it; a second command (a refund) keeps its
-- recovery point elsewhere, so its unfinished record looks exactly like
-- that, and would be deleted while its provider call may have moved
-- money. With the column, each job acts on IN_PROGRESS records only of
-- the commands it knows, and leaves every other one alone
-- (docs/decisions/0016).
--
--   * text, NOT NULL, the command's name as the Go code declares it
--     (app.CommandCharge is 'charge'). The claim writes it; the takeover
--     of an expired claim requires the same command.
--   * DEFAULT 'charge' is for the releases before this one, still running
--     during the rollout: their claim does not name the column and gets
--     'charge', which is what they claim. Every row already in the table
--     is a charge's, and gets 'charge' too. A constant default on a new
--     column only changes the catalogue (PostgreSQL 11 and later): no
--     table rewrite, no scan. The ALTER's exclusive lock first waits for
--     the transactions already on the table, all short (no network call
--     runs inside one), and is then held for an instant.
--   * No CHECK on the value: a name the jobs do not know is the safe case,
--     left alone. No index: the completer's list reads the partial index
--     of the IN_PROGRESS records (migration 00005), which stays tiny, and
--     the purge the created_at index; the command is filtered on the rows
--     those return.
--
-- Which releases may run against this schema: every release since
-- migration 00001 (the old ones never name the column). But a release
-- older than this one reads every IN_PROGRESS record as a charge's: its
-- completer and purge would delete another command's unfinished record
-- with payment_id NULL. This migration alone left that to the order of
-- releases; 00017 removes the hazard instead (a refund's record names its
-- payment, so the old statements never match it), and refunds roll out
-- beside the previous release (docs/deploying.md). A later migration then
-- drops the DEFAULT
-- (the contract step), so that a command that forgets to name itself
-- fails at its INSERT instead of passing for a charge.

-- +goose Up
ALTER TABLE idempotency_record ADD COLUMN command text NOT NULL DEFAULT 'charge';

-- +goose Down
-- Without the column every record reads as a charge's again. Refuse while
-- a record of another command exists: the releases this takes the schema
-- back to would delete it (see above).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM idempotency_record WHERE command <> 'charge') THEN
        RAISE EXCEPTION 'idempotency_record holds records of commands other than charge; finish or remove them before migrating down';
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE idempotency_record DROP COLUMN command;
