-- The refunds that await their provider's decision
-- (RefundStore.ListReceived): received (their key answered 202), PENDING,
-- received more than @micros microseconds ago, the oldest first, at most
-- @limit, over ix_refund_received. What the completer's runs look up
-- where the provider can be asked, and what the reconciliation reports
-- when no event or lookup has settled them.
SELECT f.payment_provider, f.external_refund_id, f.received_at
  FROM refund f
 WHERE f.received_at IS NOT NULL
   AND f.received_at < now() - @micros * interval '1 microsecond'
   AND f.status = 'PENDING'
 ORDER BY f.received_at
 LIMIT @limit
