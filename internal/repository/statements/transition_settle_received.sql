-- A received capture's or void's settlement (TransitionStore.SettleReceived):
-- the provider decided a transition whose key is answered already (202,
-- transition_receive.sql), and its event or a lookup says what. One
-- statement: the transition's final status, on an approval the
-- payment's (its status @payment_status, a capture's amount taken), and
-- the event; no key is written. Only a PENDING transition awaiting the
-- provider (received_at) is settled, once: a second settlement (the
-- event delivered again, or the event and a lookup at once) queues on
-- the payment's lock and then finds it settled. The lock order is the
-- claim's: the payment, then the transition.
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
-- clause transition_settled: begin
-- The transition's decision, only while it awaits the provider, once its
-- payment is locked; it awaits no longer.
settled AS (
    UPDATE payment_transition
       SET status = @status, received_at = NULL, updated_at = now()
     WHERE id = @transition AND status = 'PENDING'
       AND received_at IS NOT NULL AND payment_id IN (SELECT id FROM transition_payment)
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
)
-- clause announced: end
-- Settled by this statement; the status, and whether it awaited the
-- provider, as the statement's snapshot saw it before it waited for the
-- payment's lock (PENDING and not awaiting: it is its claim's).
SELECT EXISTS (SELECT 1 FROM announced) AS settled,
       (SELECT status FROM payment_transition WHERE id = @transition) AS status_before,
       coalesce((SELECT received_at IS NOT NULL FROM payment_transition WHERE id = @transition), false) AS awaiting
