-- Releases: runs under the previous release and this one (expand only); its ALTER of payment.holds_order rewrites payment under an exclusive lock, as 00019's did, so on a large table it needs a quiet window. The previous release does not know the statuses it allows: authorize nothing (captureMethod manual) until every replica runs this release.
--
-- Two-step payments (docs/decisions/0030): an authorization holds the
-- money, and one capture takes it or one void releases it.
--
--   * payment.capture_method: 'automatic' (a charge, as before) or
--     'manual' (an authorization).
--   * payment.captured_amount: what the capture took, at most the
--     authorized amount; refunds are of captured money only (a one-step
--     charge captures its whole amount: NULL reads as amount).
--   * the statuses AUTHORIZED (held), VOIDED (released by a void) and
--     EXPIRED (the hold lapsed at the provider, as its lookup says).
--   * the third layer counts an authorized payment as the order's live
--     payment: holds_order is status IN ('PENDING', 'SUCCEEDED',
--     'AUTHORIZED'), and ux_payment_order_paid_once reads it instead of
--     is_live (00019), under the same name; a one-step charge's record keeps
--     it true, so that update stays HOT. is_live stays, unread,
--     for the previous release's rows until a later migration drops it.
--   * payment.is_authorized and ix_payment_authorized: the expiry job's
--     list, kept off every charge's HOT update.
--   * payment_transition: a capture or a void of an authorized payment,
--     the reservation of those commands (as refund is a refund's). At
--     most one transition of a payment is PENDING or SUCCEEDED
--     (ux_payment_transition_one_winner): a capture racing a void, or two
--     captures, meet on it, and exactly one goes on to the provider.
--   * idempotency_record.transition_id: a capture's or a void's recovery
--     point. Their records name the payment in payment_id too, as a
--     refund's do (00017), for the previous release's jobs.
-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE payment ADD COLUMN IF NOT EXISTS capture_method text NOT NULL DEFAULT 'automatic'
    CHECK (capture_method IN ('automatic', 'manual'));
ALTER TABLE payment ADD COLUMN IF NOT EXISTS captured_amount numeric(19, 4)
    CHECK (captured_amount > 0 AND captured_amount <= amount);

ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_status_check,
    ADD CONSTRAINT payment_status_check
        CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED', 'AUTHORIZED', 'VOIDED', 'EXPIRED')) NOT VALID;
ALTER TABLE payment VALIDATE CONSTRAINT payment_status_check;

-- A refund never gives back more than was captured.
ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_refunds_within_capture,
    ADD CONSTRAINT payment_refunds_within_capture
        CHECK (refund_reserved <= coalesce(captured_amount, amount)) NOT VALID;
ALTER TABLE payment VALIDATE CONSTRAINT payment_refunds_within_capture;

ALTER TABLE payment ADD COLUMN IF NOT EXISTS holds_order boolean
    GENERATED ALWAYS AS (status IN ('PENDING', 'SUCCEEDED', 'AUTHORIZED')) STORED;
DROP INDEX CONCURRENTLY IF EXISTS ux_payment_order_held;
CREATE UNIQUE INDEX CONCURRENTLY ux_payment_order_held
    ON payment (order_id)
    WHERE holds_order;
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('ux_payment_order_held') IS NOT NULL THEN
        DROP INDEX IF EXISTS ux_payment_order_paid_once;
        ALTER INDEX ux_payment_order_held RENAME TO ux_payment_order_paid_once;
    END IF;
END
$$;
-- +goose StatementEnd

-- The expiry job's list: authorized payments, oldest first. The index
-- reads neither status nor updated_at, which every charge's record sets:
-- an index on either would make that update non-HOT (every index of the
-- table written again). is_authorized is false before and after a
-- one-step charge's record, so that update stays HOT.
ALTER TABLE payment ADD COLUMN IF NOT EXISTS is_authorized boolean
    GENERATED ALWAYS AS (status = 'AUTHORIZED') STORED;
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_authorized;
CREATE INDEX CONCURRENTLY ix_payment_authorized
    ON payment (created_at)
    WHERE is_authorized;

CREATE TABLE IF NOT EXISTS payment_transition (
    id          bigint         GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id  bigint         NOT NULL REFERENCES payment (id),
    client_id   text           NOT NULL,
    kind        text           NOT NULL CHECK (kind IN ('capture', 'void')),
    -- A capture's amount and the client's reference for it; a void has
    -- neither.
    amount      numeric(19, 4) CHECK (amount > 0),
    currency    char(3),
    reference   text           CHECK (length(reference) BETWEEN 1 AND 128),
    -- The key this service sends the provider (domain.Transition's
    -- ProviderIdempotencyKey): how a provider's event names it.
    provider_key text          NOT NULL,
    status      text           NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')),
    created_at  timestamptz    NOT NULL DEFAULT now(),
    updated_at  timestamptz    NOT NULL DEFAULT now(),
    CONSTRAINT payment_transition_capture_has_amount
        CHECK ((kind = 'capture') = (amount IS NOT NULL AND currency IS NOT NULL AND reference IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_payment_transition_one_winner
    ON payment_transition (payment_id)
    WHERE status IN ('PENDING', 'SUCCEEDED');
CREATE INDEX IF NOT EXISTS ix_payment_transition_payment ON payment_transition (payment_id);
CREATE INDEX IF NOT EXISTS ix_payment_transition_provider_key ON payment_transition (provider_key);

ALTER TABLE idempotency_record ADD COLUMN IF NOT EXISTS transition_id bigint REFERENCES payment_transition (id);
-- A provider's event about a capture or void finds its claim by it, as
-- 00018's indexes serve a payment's and a refund's.
DROP INDEX CONCURRENTLY IF EXISTS ix_idempotency_record_transition_in_progress;
CREATE INDEX CONCURRENTLY ix_idempotency_record_transition_in_progress
    ON idempotency_record (transition_id)
    WHERE status = 'IN_PROGRESS';

-- +goose Down
ALTER TABLE idempotency_record DROP COLUMN IF EXISTS transition_id;
DROP TABLE IF EXISTS payment_transition;
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_authorized;
ALTER TABLE payment DROP COLUMN IF EXISTS is_authorized;
DROP INDEX CONCURRENTLY IF EXISTS ux_payment_order_live;
CREATE UNIQUE INDEX CONCURRENTLY ux_payment_order_live
    ON payment (order_id)
    WHERE is_live;
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('ux_payment_order_live') IS NOT NULL THEN
        DROP INDEX IF EXISTS ux_payment_order_paid_once;
        ALTER INDEX ux_payment_order_live RENAME TO ux_payment_order_paid_once;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE payment DROP COLUMN IF EXISTS holds_order;
ALTER TABLE payment DROP CONSTRAINT IF EXISTS payment_refunds_within_capture;
ALTER TABLE payment
    DROP CONSTRAINT IF EXISTS payment_status_check,
    ADD CONSTRAINT payment_status_check
        CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED', 'FAILED')) NOT VALID;
ALTER TABLE payment DROP COLUMN IF EXISTS captured_amount;
ALTER TABLE payment DROP COLUMN IF EXISTS capture_method;
