-- The capture or void a provider's event names, by the provider key it
-- was sent under: the PENDING one if any (a declined void and the next
-- void of a payment share a key), else the latest; its payment, the
-- order's saga, and its claim in progress (ProviderReports.Transition).
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
SELECT t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status,
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
       p.id, p.client_id, p.order_id, p.customer_id, p.payment_provider,
       p.external_payment_id, p.amount, p.currency, p.status, p.created_at, p.capture_method, p.captured_amount, p.payment_method,
-- clause payment_columns: end
-- clause reported_claim: begin
-- The claim in progress, found by its command and recovery point over the
-- partial index ix_idempotency_record_in_progress, which PostgreSQL reads
-- because the join names its predicate ("r.locked_until IS NOT NULL") and
-- its key (the command, and "r.recovery_point = t.id"):
-- provider_event_charge.sql, TestClaimReadersUseTheirIndexes. NULL when
-- the key is completed. A transition's kind is its command's name.
       o.saga_id, r.client_id, r.idempotency_key, r.command_hash, r.lock_token
-- clause reported_claim: end
  FROM payment_transition t
  JOIN payment p ON p.id = t.payment_id
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN idempotency_record r ON r.command = t.kind AND r.recovery_point = t.id AND r.status = 'IN_PROGRESS' AND r.locked_until IS NOT NULL
 WHERE t.provider_key = @key
 ORDER BY t.status = 'PENDING' DESC, t.id DESC
 LIMIT 1
