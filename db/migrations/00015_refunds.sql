-- Releases: runs under the previous release and this one (expand only).
--
-- Refunds: the refund table, and the refund total of each
-- payment kept by the database, so that the refunds of a payment that are
-- not declined never add up to more than it charged, under any
-- concurrency, without check-then-act in the application.
--
-- payment.refund_reserved is that total: the sum of the payment's refunds
-- that are PENDING or SUCCEEDED. A refund's reservation adds its amount in
-- the same statement that inserts the refund row; a refund the provider
-- declines or refuses for good gives it back in the same statement that
-- sets its status (internal/repository/refunds.go). Its CHECK is the
-- backstop: whatever a statement gets wrong, the total can never go below
-- zero nor above the amount charged. Kept on the payment row, not summed
-- over refund rows on each reservation, because the payment row is one
-- row to lock: concurrent refunds of one payment queue on it and each sees
-- the total its predecessor left, where a SUM under READ COMMITTED would
-- let two of them both see room for themselves.
--
-- refund follows payment's shape, with these choices:
--   * payment_id REFERENCES payment: a refund exists only for a payment. A
--     payment row is deleted only while PENDING (a charge that did not
--     happen), and a PENDING payment is never refunded, so the key never
--     blocks a delete that the charge needs.
--   * client_id: refunds are scoped to the API client, as payments are; it
--     is the payment's client (the reservation only reserves against a
--     payment of the calling client).
--   * payment_provider: the payment's; with external_refund_id it is the
--     refund's second idempotency layer (R-DIST-IDEM-4 for refunds): one
--     external refund is one row, whatever the idempotency keys say.
--   * external_refund_id: 1 to 128 printable ASCII characters, as the
--     domain takes it (domain.NewRefund): ASCII keeps one byte one
--     character, and the id travels in the provider's idempotency key.
--   * amount numeric(19,4) and currency char(3), as payment's. The currency
--     is the payment's; the reservation checks it (a foreign key on
--     (payment_id, currency) would need one more unique index on payment,
--     the hot table, for a fact the one statement that inserts refunds
--     already enforces).
--   * status PENDING | SUCCEEDED | DECLINED | FAILED, the payment's values
--     with the payment's meanings (domain.RefundStatus). PENDING: reserved,
--     the provider is being called or its answer is unknown, so its amount
--     stays reserved.
--   * updated_at: when the status last changed.
-- ix_refund_payment_id serves the listing of a payment's refunds, and the
-- foreign key's check when a PENDING payment is deleted (without it, every
-- such delete would scan refund).
--
-- Which releases may run against it: expand only. The release before this
-- one never reads or writes refund or refund_reserved; its inserts into
-- payment name their columns, so the new column takes its default, 0, and
-- its reads (SELECT * into a struct by column name) ignore it. So the old
-- and the new binary run side by side during a rolling deploy, and a
-- rollback of the binary needs no rollback of this migration.
--
-- Lock order: a refund's reservation locks its payment row first (SELECT
-- ... FOR NO KEY UPDATE, the lock its UPDATE of refund_reserved takes
-- anyway), then inserts the refund row; settling a refund locks the payment
-- row first too, then the refund row. The key's claim, which the shared
-- core composes with these clauses, comes after both. Every command locks
-- payment before anything else, so two of them never wait on each other in
-- a cycle. NO KEY UPDATE, not UPDATE, so that the foreign-key checks of
-- rows that reference the payment (KEY SHARE) are not held up by it.
--
-- As in 00014, the CHECK is added NOT VALID and validated in a statement of
-- its own: the ALTERs hold their exclusive lock only for the catalog
-- change (adding a column with a constant default rewrites nothing), and
-- VALIDATE scans payment under a lock that lets charges go on. So this
-- migration runs outside a transaction; every statement can run again, so
-- a rerun after a failure in between completes it.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE payment ADD COLUMN IF NOT EXISTS refund_reserved numeric(19,4) NOT NULL DEFAULT 0;
ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_refund_reserved_check,
    ADD CONSTRAINT payment_refund_reserved_check
        CHECK (refund_reserved >= 0 AND refund_reserved <= amount) NOT VALID;
ALTER TABLE payment VALIDATE CONSTRAINT payment_refund_reserved_check;

CREATE TABLE IF NOT EXISTS refund (
    id                  bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id          bigint        NOT NULL REFERENCES payment (id),
    client_id           text          NOT NULL,
    payment_provider    text          NOT NULL,
    external_refund_id  text          NOT NULL CHECK (external_refund_id ~ '^[ -~]{1,128}$'),
    amount              numeric(19,4) NOT NULL CHECK (amount > 0),
    currency            char(3)       NOT NULL,
    status              text          NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')),
    created_at          timestamptz   NOT NULL DEFAULT now(),
    updated_at          timestamptz   NOT NULL DEFAULT now(),
    -- The refund's second layer: one external refund is one row.
    CONSTRAINT refund_provider_external_refund_id_key UNIQUE (payment_provider, external_refund_id)
);

-- The table is new and empty: a plain build takes no time and blocks nothing.
CREATE INDEX IF NOT EXISTS ix_refund_payment_id ON refund (payment_id);

-- +goose Down
DROP TABLE IF EXISTS refund;
ALTER TABLE payment DROP CONSTRAINT IF EXISTS payment_refund_reserved_check;
ALTER TABLE payment DROP COLUMN IF EXISTS refund_reserved;
