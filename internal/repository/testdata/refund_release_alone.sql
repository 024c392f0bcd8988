-- A PENDING refund's reservation given back, without a key
-- (Refunds.ReleaseRefund, export_test.go): the row goes, so a retry
-- reserves the external refund anew, and its amount stops counting, in one
-- statement.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (statements/README.md).
WITH
-- clause refund_payment_locked: begin
-- The payment, locked first, as every statement that writes a refund
-- locks it.
refund_payment AS MATERIALIZED (
    SELECT p.id
      FROM payment p
      JOIN refund r ON r.payment_id = p.id
     WHERE r.id = @refund
       FOR NO KEY UPDATE OF p
),
-- clause refund_payment_locked: end
-- Only a PENDING refund: a decided one is never undone.
released AS (
    DELETE FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM refund_payment)
 RETURNING payment_id, amount
),
given_back AS (
    UPDATE payment p
       SET refund_reserved = p.refund_reserved - r.amount
      FROM released r
     WHERE p.id = r.payment_id
 RETURNING p.refund_reserved
)
SELECT EXISTS (SELECT 1 FROM released) AS done,
       (SELECT status FROM refund WHERE id = @refund) AS status_before
