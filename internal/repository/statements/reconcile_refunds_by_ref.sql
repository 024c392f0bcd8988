-- ReconciliationStore.BookedByRef (reconciliation.go): our refunds by the
-- provider's name of them, over refund's unique (provider, external id),
-- each with its payment's provider and external id.
SELECT f.id, f.payment_provider, f.external_refund_id, p.payment_provider, p.external_payment_id,
       f.status, f.amount, f.currency, f.created_at, f.updated_at
  FROM unnest(@providers::text[], @externals::text[]) AS named (provider, external)
  JOIN refund f ON f.payment_provider = named.provider AND f.external_refund_id = named.external
  JOIN payment p ON p.id = f.payment_id
