-- A charge's PENDING payment reserved on its own (reserve, in the
-- transaction of phase 1's rare path), unless a unique index says no: the
-- second layer's UNIQUE (payment_provider, external_payment_id), or the
-- third's ux_payment_order_live. ON CONFLICT DO NOTHING with no target
-- covers both: a violation would abort the transaction (and the key's
-- claim with it), while DO NOTHING waits for a concurrent insert of the
-- same pair or order to commit and then yields no row; the next
-- statements read the row in the way (payment_by_external.sql,
-- payment_live_of_order.sql).
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
INSERT INTO payment AS p (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method, payment_method)
VALUES (@client, @order, @customer, @provider, @external, @amount, @currency, 'PENDING', @capture_method, NULLIF(@payment_method, ''))
ON CONFLICT DO NOTHING
RETURNING
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
       p.id, p.client_id, p.order_id, p.customer_id, p.payment_provider,
       p.external_payment_id, p.amount, p.currency, p.status, p.created_at, p.capture_method, p.captured_amount, p.payment_method
-- clause payment_columns: end
