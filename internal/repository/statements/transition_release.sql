-- A capture's or a void's claim and its PENDING transition given back, in
-- one statement (TransitionStore.Release, conn.releaseKey), in the claim's
-- lock order: the payment, the key, the transition.
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
-- clause released: begin
-- The claim deleted, fenced by the lock token, once the payment is
-- locked; it returns the record's recovery point. A request whose lock was
-- taken over matches nothing here, and every other write of the release
-- hangs on this clause.
released AS (
    DELETE FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND EXISTS (SELECT 1 FROM transition_payment)
 RETURNING recovery_point
),
-- clause released: end
-- Only a PENDING transition, and only the one the released key names.
removed AS (
    DELETE FROM payment_transition
     WHERE id = @transition AND status = 'PENDING'
       AND id IN (SELECT recovery_point FROM released)
)
SELECT EXISTS (SELECT 1 FROM released)
