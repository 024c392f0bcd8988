-- A refund's phase 3 when the provider answered "received"
-- (RefundStore.RecordReceived, conn.recordFenced): the key completed with
-- the 202, and the refund left PENDING, noted as awaiting the provider
-- (received_at). Its amount stays in the payment's refund_reserved, so no
-- other refund can take it meanwhile. No event: the provider's decision
-- is announced when its event (or a lookup) settles the refund
-- (refund_settle_received.sql). Lock order: the payment, the refund, the
-- key, as refund_record.sql's.
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
-- write hangs on this clause.
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
-- The receipt, only with the key's completion: still PENDING, awaiting
-- the provider.
received AS (
    UPDATE refund
       SET received_at = now(), updated_at = now()
     WHERE id = @refund AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING 1
)
-- Everything written, the token still owning the key (as the statement's
-- snapshot sees it), and the refund's status.
SELECT EXISTS (SELECT 1 FROM received) AS recorded,
-- clause lock_held: begin
       EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token) AS lock_held,
-- clause lock_held: end
       (SELECT status FROM refund WHERE id = @refund) AS refund_status
