-- ReconciliationStore.BookedInWindow (reconciliation.go): our refunds
-- reserved in [@from, @to), each with its payment's provider and external
-- id (how the provider names the payment), over the BRIN index on
-- refund.created_at (00027) and the payment's primary key.
SELECT f.id, f.payment_provider, f.external_refund_id, p.payment_provider, p.external_payment_id,
       f.status, f.amount, f.currency, f.created_at, f.updated_at
  FROM refund f
  JOIN payment p ON p.id = f.payment_id
 WHERE f.created_at >= @from AND f.created_at < @to
