-- The payment a provider's event (a webhook) names, by its provider key
-- (the UNIQUE pair of R-DIST-IDEM-4), its order's saga, and its claim in
-- progress (ProviderReports.Charge): the charge's own, as a refund's
-- record names its payment too.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
SELECT p.id, p.client_id, p.order_id, p.customer_id, p.payment_provider,
       p.external_payment_id, p.amount, p.currency, p.status, p.created_at, p.capture_method, p.captured_amount, p.payment_method,
-- clause payment_columns: end
-- clause reported_claim: begin
-- The claim an event about a PENDING object records under: its
-- IN_PROGRESS record, found by its recovery point (the partial index
-- ix_idempotency_record_payment_in_progress), NULL when the key is
-- completed. Each such index holds only the claims whose recovery point
-- its column is (migration 00023), and PostgreSQL reads it only for a
-- query that implies its predicate: the join's "r.payment_id = p.id"
-- implies "payment_id IS NOT NULL", and 'charge', a literal, its command,
-- in generic plans too. A parameter in its place, or a join that no
-- longer compares the column, would leave the index unread
-- (TestClaimReadersUseTheirIndexes).
       o.saga_id, r.client_id, r.idempotency_key, r.command_hash, r.lock_token
-- clause reported_claim: end
  FROM payment p
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.payment_id = p.id AND r.status = 'IN_PROGRESS' AND r.command = 'charge'
 WHERE p.payment_provider = @provider AND p.external_payment_id = @external
