-- A PENDING refund's final status, without a key (Refunds.SettleRefund,
-- export_test.go): the tests prove what refund_record.sql's clauses do on
-- their own. DECLINED or FAILED gives the refund's amount back to the
-- payment's refund total, in one statement: a refund the provider did not
-- make stops counting exactly when it is recorded so. SUCCEEDED keeps its
-- amount reserved for good.
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
-- clause refund_settled: begin
-- The refund's decision, once, only with its payment locked.
settled AS (
    UPDATE refund
       SET status = @status, updated_at = now()
     WHERE id = @refund AND status = 'PENDING'
       AND @status IN ('SUCCEEDED', 'DECLINED', 'FAILED')
       AND payment_id IN (SELECT id FROM refund_payment)
 RETURNING payment_id, amount, status
),
given_back AS (
    UPDATE payment p
       SET refund_reserved = p.refund_reserved - s.amount
      FROM settled s
     WHERE p.id = s.payment_id AND s.status IN ('DECLINED', 'FAILED')
 RETURNING p.refund_reserved
)
-- clause refund_settled: end
SELECT EXISTS (SELECT 1 FROM settled) AS done,
       (SELECT status FROM refund WHERE id = @refund) AS status_before
