-- ReconciliationStore.BookedByRef (reconciliation.go): our payments by
-- the provider's name of them, its provider and our external id (the
-- provider key), over the unique index that is the second layer of
-- R-DIST-IDEM-4. @providers and @externals are parallel arrays.
SELECT p.id, p.payment_provider, p.external_payment_id, p.status, p.amount, p.captured_amount, p.currency,
       p.created_at, p.updated_at
  FROM unnest(@providers::text[], @externals::text[]) AS named (provider, external)
  JOIN payment p ON p.payment_provider = named.provider AND p.external_payment_id = named.external
