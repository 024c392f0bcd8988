-- Releases: runs under the previous release and this one (expand only); with 00017, applied in the same rollout, the previous release's jobs leave refund records alone.
--
-- idempotency_record.refund_id: the recovery point of a refund's record.
--
-- A command's reservation is linked to its key in the claim statement
-- itself (docs/adding-a-command.md, "The recovery point"), and the link is
-- named after what it points at. A charge's record points at its payment
-- (payment_id); a refund's record points at its refund row, here. The
-- jobs read payment_id only in records named 'charge' (migration 00013),
-- and refund_id only in records named 'refund'. (A refund's record names
-- its refund's payment in payment_id as well since 00017, for the previous
-- release's jobs, which read payment_id NULL as "nothing reserved".)
--
--   * bigint, NULL: a record of any other command has none, and a refund's
--     claim that reserved nothing (a rare answer, about to be completed or
--     rolled back) has none either.
--   * REFERENCES refund (id): a refund row is deleted only by ReleaseRefund,
--     in the transaction that releases its key, so the reference never
--     blocks a delete the refund needs. A PENDING refund is never deleted
--     while its record stands.
--   * No index: records are reached by their key. The one delete of a
--     refund row (ReleaseRefund, when the provider did not act for now)
--     makes the foreign key's check scan idempotency_record; it is rare,
--     and an index on a hot table for it is not worth its writes. If the
--     fault dashboards ever show many such releases, add one CONCURRENTLY.
--
-- Which releases may run against this schema: expand only. Every release
-- since migration 00001 names its columns in its inserts and reads records
-- by column name, so it never sees refund_id. A release older than 00013
-- must not run beside the first release that writes refund records (see
-- 00013); that rule is unchanged. A rollback of the binary needs no
-- rollback of this migration. Adding a nullable column without a default
-- only changes the catalogue.

-- +goose Up
ALTER TABLE idempotency_record ADD COLUMN refund_id bigint REFERENCES refund (id);

-- +goose Down
-- Without the column a refund's record in progress loses its recovery
-- point, and the completer could no longer tell that its refund may be at
-- the provider: it would release the record as a charge's that reserved
-- nothing (the hazard 00013 describes). Refuse while such a record
-- exists: finish it first (the completer does) or remove it knowingly.
-- A completed record keeps its stored answer and needs no link.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM idempotency_record WHERE status = 'IN_PROGRESS' AND refund_id IS NOT NULL) THEN
        RAISE EXCEPTION 'idempotency_record holds refunds in progress; let the completer finish them before migrating down';
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE idempotency_record DROP COLUMN refund_id;
