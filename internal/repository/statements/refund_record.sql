-- A refund's phase 3 in one statement (RefundStore.Record,
-- conn.recordOutcome): the key's outcome, the refund's final status (a
-- DECLINED or FAILED refund gives its amount back to the payment's refund
-- total) and the event, all or none.
--
-- Lock order: the payment first (refund_payment), then the refund
-- (refund_locked), then the key (completed, whose guard reads
-- refund_locked): a takeover's phase 1 takes the same order, so the old
-- owner's phase 3 and a new owner's phase 1 never wait on each other in a
-- cycle.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause refund_payment_locked: begin
-- The payment of refund @refund, locked first, as the reservation locks
-- it: every statement that writes a refund takes the payment's lock
-- before the refund's.
refund_payment AS MATERIALIZED (
    SELECT p.id
      FROM payment p
      JOIN refund r ON r.payment_id = p.id
     WHERE r.id = @refund
       FOR NO KEY UPDATE OF p
),
-- clause refund_payment_locked: end
-- The refund, locked next, only while it is PENDING.
refund_locked AS MATERIALIZED (
    SELECT id
      FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM refund_payment)
       FOR NO KEY UPDATE
),
-- clause completed: begin
-- The key completed with the response, fenced by the lock token, only
-- while the refund is PENDING and locked. A request whose lock was taken
-- over matches nothing here, and so writes nothing anywhere: every other
-- write of phase 3 hangs on this clause.
completed AS (
    UPDATE idempotency_record
       SET status = 'COMPLETED', response = CAST(@response AS json), http_status = @http_status,
           lock_token = NULL, locked_until = NULL, updated_at = now()
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND EXISTS (SELECT 1 FROM refund_locked)
 RETURNING 1
),
-- clause completed: end
-- clause refund_settled: begin
-- The refund's decision, @status, once: only a PENDING refund, only to a
-- final status, and only with the key's completion. Two settlings of one
-- refund queue on the payment's lock, and the second finds it no longer
-- PENDING. A refund not made gives its amount back (given_back). The
-- payment's updated_at stays: it says when the payment's own status
-- changed.
settled AS (
    UPDATE refund
       SET status = @status, updated_at = now()
     WHERE id = @refund AND status = 'PENDING'
       AND @status IN ('SUCCEEDED', 'DECLINED', 'FAILED')
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING payment_id, amount, status
),
given_back AS (
    UPDATE payment p
       SET refund_reserved = p.refund_reserved - s.amount
      FROM settled s
     WHERE p.id = s.payment_id AND s.status IN ('DECLINED', 'FAILED')
 RETURNING p.refund_reserved
),
-- clause refund_settled: end
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
-- snapshot sees it), and the refund's status.
SELECT EXISTS (SELECT 1 FROM announced) AS recorded,
-- clause lock_held: begin
       EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token) AS lock_held,
-- clause lock_held: end
       (SELECT status FROM refund WHERE id = @refund) AS refund_status
