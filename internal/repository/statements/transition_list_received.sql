-- The captures and voids that await their provider's decision
-- (TransitionStore.ListReceived): received (their key answered 202),
-- PENDING, received more than @micros microseconds ago, the oldest first,
-- at most @limit, over ix_payment_transition_received. What the
-- completer's runs look up where the provider can be asked, and what the
-- reconciliation reports when no event or lookup has settled them.
SELECT t.kind, p.payment_provider, t.provider_key, t.received_at
  FROM payment_transition t
  JOIN payment p ON p.id = t.payment_id
 WHERE t.received_at IS NOT NULL
   AND t.received_at < now() - @micros * interval '1 microsecond'
   AND t.status = 'PENDING'
 ORDER BY t.received_at
 LIMIT @limit
