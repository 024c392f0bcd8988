-- A received refund's settlement (RefundStore.SettleReceived): the
-- provider decided a refund whose key is answered already (202,
-- refund_receive.sql), and its event or a lookup says what. One
-- statement: the refund's final status (DECLINED and FAILED give its
-- amount back to the payment's refund total) and its event; no key is
-- written. Only a PENDING refund awaiting the provider (received_at) is
-- settled, once: a second settlement queues on the payment's lock and
-- then finds it settled. Lock order: the payment, then the refund.
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
-- clause refund_settled: begin
-- The refund's decision, @status, once: only a PENDING refund awaiting
-- the provider, only to a final status, and only with its payment locked;
-- it awaits no longer. A refund not made gives its amount back
-- (given_back).
settled AS (
    UPDATE refund
       SET status = @status, received_at = NULL, updated_at = now()
     WHERE id = @refund AND status = 'PENDING'
       AND @status IN ('SUCCEEDED', 'DECLINED', 'FAILED')
       AND received_at IS NOT NULL AND payment_id IN (SELECT id FROM refund_payment)
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
)
-- clause announced: end
-- Settled by this statement; the status, and whether it awaited the
-- provider, as the statement's snapshot saw it before it waited for the
-- payment's lock (PENDING and not awaiting: it is its claim's).
SELECT EXISTS (SELECT 1 FROM announced) AS settled,
       (SELECT status FROM refund WHERE id = @refund) AS status_before,
       coalesce((SELECT received_at IS NOT NULL FROM refund WHERE id = @refund), false) AS awaiting
