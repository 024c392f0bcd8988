-- Releases: runs under the previous release and this one (expand only: two nullable columns, which the previous release never names, and two partial indexes it never reads). A modification received (a capture, void or refund left PENDING with its key answered 202) is settled by this release only: a provider's event about one, met by a replica of the previous release, is answered 500 and delivered again.
--
-- Modifications a provider received and decides later (Adyen's shape:
-- ProviderAbilities.Modifications is AnswersReceived). A capture, void or
-- refund the provider answered "received" keeps its PENDING reservation,
-- its amount held (the one-winner index, refund_reserved), while its key
-- is answered 202 at once; the provider's event, or a later lookup,
-- settles it.
--
--   * payment_transition.received_at and refund.received_at: when the
--     provider received it, set with the key's 202 and cleared by its
--     settlement: a PENDING row with it set awaits the provider, and is
--     the settlement's to record, in a statement that completes no key
--     (its key is answered); a PENDING row without it is its claim's. A
--     CHECK keeps it on PENDING rows only.
--   * ix_payment_transition_received and ix_refund_received: the rows
--     awaiting the provider, oldest first: the completer's runs look them
--     up after a while where the provider can be asked, and the
--     reconciliation lists the ones no event settled. Their predicate
--     reads received_at alone, so a refund's status update, which leaves
--     it as it is, stays HOT as 00019 made it; only the settlement of a
--     received one writes the index.
-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE payment_transition ADD COLUMN IF NOT EXISTS received_at timestamptz;
ALTER TABLE refund ADD COLUMN IF NOT EXISTS received_at timestamptz;
ALTER TABLE payment_transition
    DROP CONSTRAINT IF EXISTS payment_transition_received_is_pending,
    ADD CONSTRAINT payment_transition_received_is_pending
        CHECK (received_at IS NULL OR status = 'PENDING') NOT VALID;
ALTER TABLE payment_transition VALIDATE CONSTRAINT payment_transition_received_is_pending;
ALTER TABLE refund
    DROP CONSTRAINT IF EXISTS refund_received_is_pending,
    ADD CONSTRAINT refund_received_is_pending
        CHECK (received_at IS NULL OR status = 'PENDING') NOT VALID;
ALTER TABLE refund VALIDATE CONSTRAINT refund_received_is_pending;
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_transition_received;
CREATE INDEX CONCURRENTLY ix_payment_transition_received
    ON payment_transition (received_at)
    WHERE received_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_refund_received;
CREATE INDEX CONCURRENTLY ix_refund_received
    ON refund (received_at)
    WHERE received_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_refund_received;
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_transition_received;
ALTER TABLE refund DROP COLUMN IF EXISTS received_at;
ALTER TABLE payment_transition DROP COLUMN IF EXISTS received_at;
