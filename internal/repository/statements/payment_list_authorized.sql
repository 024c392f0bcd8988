-- The expiry job's page (TransitionStore.ListAuthorized): payments
-- authorized long enough ago with no transition in flight, over
-- ix_payment_authorized.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
SELECT p.id, p.client_id, p.order_id, p.customer_id, p.payment_provider,
       p.external_payment_id, p.amount, p.currency, p.status, p.created_at, p.capture_method, p.captured_amount, p.payment_method
-- clause payment_columns: end
  FROM payment p
 WHERE p.is_authorized AND p.created_at < now() - @micros * interval '1 microsecond'
   AND NOT EXISTS (SELECT 1 FROM payment_transition t WHERE t.payment_id = p.id AND t.status = 'PENDING')
 ORDER BY p.created_at
 LIMIT @limit
