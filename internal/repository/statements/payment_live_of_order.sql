-- The payment the third layer stopped a reservation on (reserve): the
-- order's one PENDING, SUCCEEDED or AUTHORIZED payment (holds_order, the
-- predicate of ux_payment_order_live).
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
 WHERE p.order_id = @order AND p.holds_order
