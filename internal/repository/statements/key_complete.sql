-- An answer that needs no provider call stored under a claimed key
-- (Keys.Complete), fenced by the lock token, with the answer's own message
-- when it has one (a saga step's reply): both or neither.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause completed: begin
-- The key completed with the response, fenced by the lock token: a
-- request whose lock was taken over matches nothing here, and so writes
-- nothing anywhere, since every other write hangs on this clause. Its
-- guard, that the command's reservation is still PENDING, is true here:
-- there is no reservation.
completed AS (
    UPDATE idempotency_record
       SET status = 'COMPLETED', response = CAST(@response AS json), http_status = @http_status,
           lock_token = NULL, locked_until = NULL, updated_at = now()
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND true
 RETURNING 1
),
-- clause completed: end
-- clause replied: begin
-- The stored response's own message (app.Publication), when @reply: a saga
-- step's reply, whose payload is the response stored, appended to the
-- outbox with the answer it carries. A reply's message is its answer, byte
-- for byte: a re-sent step gets it again with the same eventId
-- (Outbox.Republish).
replied AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @reply_event_id, @reply_topic, @reply_key, @reply_type, CAST(@response AS json),
           CAST(NULLIF(@trace_context, '') AS json)
      FROM completed
     WHERE @reply
 RETURNING 1
)
-- clause replied: end
SELECT EXISTS (SELECT 1 FROM completed)
