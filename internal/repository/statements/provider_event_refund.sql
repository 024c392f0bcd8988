-- The refund a provider's event names, by its provider key
-- (refund_provider_external_refund_id_key), its payment, the order's saga,
-- and its claim in progress (ProviderReports.Refund).
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
SELECT f.id, f.payment_id, f.client_id, f.payment_provider, f.external_refund_id, f.amount, f.currency, f.status, f.created_at,
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
       p.id, p.client_id, p.order_id, p.customer_id, p.payment_provider,
       p.external_payment_id, p.amount, p.currency, p.status, p.created_at, p.capture_method, p.captured_amount, p.payment_method,
-- clause payment_columns: end
-- clause reported_claim: begin
-- The claim in progress, found by its command and recovery point over the
-- partial index ix_idempotency_record_in_progress, which PostgreSQL reads
-- because the join names its predicate ("r.locked_until IS NOT NULL") and
-- its key (the command, and "r.recovery_point = f.id"):
-- provider_event_charge.sql, TestClaimReadersUseTheirIndexes. NULL when
-- the key is completed.
       o.saga_id, r.client_id, r.idempotency_key, r.command_hash, r.lock_token
-- clause reported_claim: end
  FROM refund f
  JOIN payment p ON p.id = f.payment_id
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.command = 'refund' AND r.recovery_point = f.id AND r.status = 'IN_PROGRESS' AND r.locked_until IS NOT NULL
 WHERE f.payment_provider = @provider AND f.external_refund_id = @external
