-- An answer stored under a key that holds no record (Keys.Answer), with
-- its message when it has one; a record already there is left as it is.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
answered AS (
    INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status)
    VALUES (@client, @key, @command, @hash, 'COMPLETED', CAST(@response AS json), @http_status)
        ON CONFLICT (client_id, idempotency_key) DO NOTHING
 RETURNING 1
),
-- clause replied: begin
-- The answer's own message, when @reply (a saga step's reply), only with
-- the answer: see key_complete.sql.
replied AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @reply_event_id, @reply_topic, @reply_key, @reply_type, CAST(@response AS json),
           CAST(NULLIF(@trace_context, '') AS json)
      FROM answered
     WHERE @reply
 RETURNING 1
)
-- clause replied: end
SELECT EXISTS (SELECT 1 FROM answered)
