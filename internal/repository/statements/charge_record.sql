-- A charge's phase 3 in one statement, atomic without a transaction
-- around it (ChargeStore.Record, conn.recordOutcome): the key's outcome,
-- the payment's final status and the event that announces it, all or
-- none.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause completed: begin
-- The key completed with the response, fenced by the lock token, only
-- while the payment is still PENDING. A request whose lock was taken over
-- matches nothing here, and so writes nothing anywhere: every other write
-- of phase 3 hangs on this clause.
completed AS (
    UPDATE idempotency_record
       SET status = 'COMPLETED', response = CAST(@response AS json), http_status = @http_status,
           lock_token = NULL, locked_until = NULL, updated_at = now()
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND EXISTS (SELECT 1 FROM payment WHERE id = @payment_id AND status = 'PENDING')
 RETURNING 1
),
-- clause completed: end
-- The provider's decision, only with the key's completion.
decided AS (
    UPDATE payment
       SET status = @final_status, updated_at = now()
     WHERE id = @payment_id AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING id
),
-- clause announced: begin
-- The outbox row (R-DIST-IDEM-1): one event per decided reservation,
-- written with the decision; the relay publishes it after the commit.
announced AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @event_id, @topic, @message_key, @event_type, CAST(@payload AS json),
           CAST(NULLIF(@trace_context, '') AS json) -- '': the request was not traced
      FROM decided
 RETURNING 1
),
-- clause announced: end
-- clause replied: begin
-- The stored response's own message (app.Publication), when @reply: a saga
-- step's reply, whose payload is the response stored, appended to the
-- outbox with the answer it carries and only with it. A reply's message is
-- its answer, byte for byte: a re-sent step gets it again with the same
-- eventId (Outbox.Republish).
replied AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @reply_event_id, @reply_topic, @reply_key, @reply_type, CAST(@response AS json),
           CAST(NULLIF(@trace_context, '') AS json)
      FROM announced
     WHERE @reply
 RETURNING 1
)
-- clause replied: end
-- The event appended (so everything was written); whether the token still
-- owns the key, as the statement's snapshot sees it (if not, the lock was
-- lost); and the payment's status, which says why nothing was written
-- otherwise.
SELECT EXISTS (SELECT 1 FROM announced) AS recorded,
-- clause lock_held: begin
       EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token) AS lock_held,
-- clause lock_held: end
       (SELECT status FROM payment WHERE id = @payment_id) AS payment_status
