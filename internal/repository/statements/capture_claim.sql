-- A capture's phase 1 in one statement (TransitionStore.Claim), @atomic on
-- the pool as a charge's (charge_claim.sql says why): the capture reserved
-- on its AUTHORIZED payment, one winner per payment, and the key claimed.
-- void_claim.sql is this statement naming its own command.
--
-- The payment is locked first: two transitions of one payment queue
-- there, and the second's insert then meets the first's row in
-- ux_payment_transition_one_winner and inserts nothing (DO NOTHING: the
-- index is the judge, and no error aborts a transaction the statement runs
-- in). The lock order is a refund's: the payment, then the transition,
-- then the key.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
-- clause transition_claim: begin
WITH
-- The payment, if it is the client's, locked before anything is written.
transition_payment AS MATERIALIZED (
    SELECT id, status, capture_method
      FROM payment
     WHERE id = @payment AND client_id = @client
       FOR NO KEY UPDATE
),
-- The PENDING transition, only of an authorized two-step payment, and only
-- if no other transition of it is PENDING or SUCCEEDED.
reserved AS (
    INSERT INTO payment_transition (payment_id, client_id, kind, amount, currency, reference, provider_key, status)
    SELECT id, @client, @kind, CAST(@amount AS numeric), CAST(NULLIF(@currency, '') AS char(3)), NULLIF(@reference, ''), @provider_key, 'PENDING'
      FROM transition_payment
     WHERE status = 'AUTHORIZED' AND capture_method = 'manual'
        ON CONFLICT DO NOTHING
 RETURNING *
),
-- clause claimed: begin
-- The key claimed, its recovery point the transition just reserved (the
-- key's lock is the last every command takes): insert-if-absent, or the
-- takeover of an IN_PROGRESS claim of the same command and hash whose lock
-- has run out, with a new lock_token that fences the old owner out and
-- the recovery point it finds (charge_claim.sql says it at length). The
-- command is a literal, as every command's claim names its own. The
-- record names the transition's payment too (payment_id), as a refund's
-- does (decision 0022), and the transition in transition_id, where a build
-- before migration 00024 looks for it.
claimed AS (
    INSERT INTO idempotency_record AS r (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, transition_id, payment_id)
    VALUES (@client, @key, 'capture', @hash, 'IN_PROGRESS', @token, clock_timestamp() + @lock_micros * interval '1 microsecond', (SELECT id FROM reserved), (SELECT id FROM reserved), (SELECT payment_id FROM reserved))
        ON CONFLICT (client_id, idempotency_key) DO UPDATE
       SET lock_token = EXCLUDED.lock_token,
           locked_until = EXCLUDED.locked_until,
           recovery_point = coalesce(r.recovery_point, EXCLUDED.recovery_point),
           transition_id = coalesce(r.transition_id, EXCLUDED.transition_id),
           payment_id = coalesce(r.payment_id, EXCLUDED.payment_id),
           updated_at = now()
     WHERE r.status = 'IN_PROGRESS'
       AND r.locked_until < clock_timestamp()
       AND r.command = EXCLUDED.command
       AND r.command_hash = EXCLUDED.command_hash
 RETURNING r.recovery_point
),
-- clause claimed: end
-- clause goes_on_with: begin
-- The reservation this command goes on with: the one just reserved, or,
-- after a takeover, the recovery point.
transitioned AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT t.* FROM payment_transition t JOIN claimed c ON t.id = c.recovery_point
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
-- clause goes_on_with: end
-- clause claim_answers: begin
-- The key claimed, the reservation made, and the recovery point the claim
-- holds.
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed,
       EXISTS (SELECT 1 FROM reserved) AS reserved,
       (SELECT recovery_point FROM claimed) AS recovery_point,
-- clause claim_answers: end
       t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status
  FROM (SELECT 1) AS one
  LEFT JOIN transitioned t ON true
-- clause usual_answer: begin
-- On its own (atomic), keep only a claimed key with a PENDING transition,
-- which is its recovery point; any other answer raises, and the error
-- rolls back everything above.
 WHERE CASE WHEN @atomic AND NOT coalesce(
                 EXISTS (SELECT 1 FROM claimed)
             AND t.status = 'PENDING'
             AND t.id = (SELECT recovery_point FROM claimed), false)
            THEN claim_needs_transaction()
            ELSE true
       END
-- clause usual_answer: end
-- clause transition_claim: end
