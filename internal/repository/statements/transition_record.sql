-- A capture's or a void's phase 3 in one statement (TransitionStore.Record,
-- conn.recordOutcome): the key completed, the transition's final status,
-- on an approval the payment's (its status @payment_status, a capture's
-- amount taken), and the event. The lock order is the claim's: the
-- payment, then the transition, then the key.
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
-- other write of phase 3 hangs on this clause.
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
-- clause transition_settled: begin
-- The transition's decision, only with the key's completion.
settled AS (
    UPDATE payment_transition
       SET status = @status, updated_at = now()
     WHERE id = @transition AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING payment_id, kind, amount
),
-- Only an approval moves the payment on, and only an AUTHORIZED one: the
-- one-winner index lets no second transition get this far.
moved AS (
    UPDATE payment p
       SET status = @payment_status,
           captured_amount = CASE WHEN s.kind = 'capture' THEN s.amount ELSE p.captured_amount END,
           updated_at = now()
      FROM settled s
     WHERE p.id = s.payment_id AND @status = 'SUCCEEDED' AND p.status = 'AUTHORIZED'
),
-- clause transition_settled: end
-- clause announced: begin
-- The outbox row (R-DIST-IDEM-1): one event per decided reservation,
-- written with the decision; the relay publishes it after the commit.
announced AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @event_id, @topic, @message_key, @event_type, CAST(@payload AS json),
           CAST(NULLIF(@trace_context, '') AS json) -- '': the request was not traced
      FROM settled
 RETURNING 1
),
-- clause announced: end
-- clause replied: begin
-- The stored response's own message, when @reply (a saga step's reply),
-- only with the event: see charge_record.sql.
replied AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @reply_event_id, @reply_topic, @reply_key, @reply_type, CAST(@response AS json),
           CAST(NULLIF(@trace_context, '') AS json)
      FROM announced
     WHERE @reply
 RETURNING 1
)
-- clause replied: end
-- Everything written, the token still owning the key (as the statement's
-- snapshot sees it), and the transition's status.
SELECT EXISTS (SELECT 1 FROM announced) AS recorded,
-- clause lock_held: begin
       EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token) AS lock_held,
-- clause lock_held: end
       (SELECT status FROM payment_transition WHERE id = @transition) AS transition_status
