-- A capture's or a void's phase 3 when the provider answered "received"
-- (TransitionStore.RecordReceived, conn.recordFenced): the key completed
-- with the 202, and the transition left PENDING, noted as awaiting the
-- provider (received_at). It keeps the payment AUTHORIZED, held by it:
-- the one-winner index lets no other capture or void of the payment
-- begin. No event: the provider's decision is announced when its event
-- (or a lookup) settles the transition (transition_settle_received.sql).
-- The lock order is the claim's: the payment, then the transition, then
-- the key.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause transition_payment_locked: begin
-- The payment of transition @transition, locked first, as the claim locks
-- it.
transition_payment AS MATERIALIZED (
    SELECT p.id
      FROM payment p
      JOIN payment_transition t ON t.payment_id = p.id
     WHERE t.id = @transition
       FOR NO KEY UPDATE OF p
),
-- clause transition_payment_locked: end
-- The transition, locked next, only while it is PENDING.
transition_locked AS MATERIALIZED (
    SELECT id
      FROM payment_transition
     WHERE id = @transition AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM transition_payment)
       FOR NO KEY UPDATE
),
-- clause completed: begin
-- The key completed with the response, fenced by the lock token, only
-- while the transition is PENDING and locked. A request whose lock was
-- taken over matches nothing here, and so writes nothing anywhere: every
-- other write hangs on this clause.
completed AS (
    UPDATE idempotency_record
       SET status = 'COMPLETED', response = CAST(@response AS json), http_status = @http_status,
           lock_token = NULL, locked_until = NULL, updated_at = now()
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND EXISTS (SELECT 1 FROM transition_locked)
 RETURNING 1
),
-- clause completed: end
-- The receipt, only with the key's completion: still PENDING, awaiting
-- the provider.
received AS (
    UPDATE payment_transition
       SET received_at = now(), updated_at = now()
     WHERE id = @transition AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING 1
)
-- Everything written, the token still owning the key (as the statement's
-- snapshot sees it), and the transition's status.
SELECT EXISTS (SELECT 1 FROM received) AS recorded,
-- clause lock_held: begin
       EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token) AS lock_held,
-- clause lock_held: end
       (SELECT status FROM payment_transition WHERE id = @transition) AS transition_status
