-- Releases: runs under the previous release and this one (expand only).
--
-- A charge may name the provider's payment method (Stripe's pm_... id,
-- paymentMethod in the request), and the method is part of the command's
-- hash. The payment keeps it, so that the completer rebuilds an abandoned
-- charge as its client sent it: without the column the rebuilt command's
-- hash differs from the record's, and the completer leaves such a charge to
-- the client's retry or the provider's event.
--
-- Expand only: a nullable column with no default is a catalog change, and
-- the release before this one neither writes nor reads it.

-- +goose Up
ALTER TABLE payment
    ADD COLUMN IF NOT EXISTS payment_method text
        CHECK (length(payment_method) BETWEEN 1 AND 255);

-- +goose Down
ALTER TABLE payment DROP COLUMN IF EXISTS payment_method;
