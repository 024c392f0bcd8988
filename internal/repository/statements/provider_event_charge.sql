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
-- IN_PROGRESS record, found by its command and its recovery point in the
-- partial index of every claim in progress,
-- ix_idempotency_record_in_progress (its key is the two), NULL when the
-- key is completed. PostgreSQL reads a partial index only for a query that
-- implies its predicate, locked_until IS NOT NULL: a literal condition of
-- the join, so in generic plans too. A parameter in its place, or a join
-- that no longer compares the recovery point, would leave the index
-- unread (TestClaimReadersUseTheirIndexes).
       o.saga_id, r.client_id, r.idempotency_key, r.command_hash, r.lock_token
-- clause reported_claim: end
  FROM payment p
  LEFT JOIN order_projection o ON o.order_id = p.order_id
  LEFT JOIN LATERAL (
        SELECT client_id, idempotency_key, command_hash, lock_token
          FROM idempotency_record
         WHERE command = 'charge' AND recovery_point = p.id AND status = 'IN_PROGRESS' AND locked_until IS NOT NULL
         UNION ALL
        -- A claim the previous release made names its payment in
        -- payment_id alone (migration 00024), in the partial index
        -- ix_idempotency_record_previous_charge, which no claim of this
        -- release enters. The contract step drops this branch.
        SELECT client_id, idempotency_key, command_hash, lock_token
          FROM idempotency_record
         WHERE command = 'charge' AND recovery_point IS NULL AND payment_id = p.id AND status = 'IN_PROGRESS'
       ) r ON true
 WHERE p.payment_provider = @provider AND p.external_payment_id = @external
