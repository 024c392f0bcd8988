-- A lapsed hold recorded (TransitionStore.Expire): the payment EXPIRED and
-- its event, in one statement, only while it is AUTHORIZED with nothing in
-- flight (a capture or void reserved since holds the payment's lock or its
-- row).
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
expired AS (
    UPDATE payment p
       SET status = 'EXPIRED', updated_at = now()
     WHERE p.id = @payment_id AND p.status = 'AUTHORIZED'
       AND NOT EXISTS (SELECT 1 FROM payment_transition t WHERE t.payment_id = p.id AND t.status = 'PENDING')
 RETURNING p.id
),
-- clause announced: begin
-- The outbox row (R-DIST-IDEM-1), written with the expiry; the relay
-- publishes it after the commit.
announced AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @event_id, @topic, @message_key, @event_type, CAST(@payload AS json),
           CAST(NULLIF(@trace_context, '') AS json) -- '': the request was not traced
      FROM expired
 RETURNING 1
)
-- clause announced: end
SELECT EXISTS (SELECT 1 FROM announced)
