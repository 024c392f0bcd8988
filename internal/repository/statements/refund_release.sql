-- A refund's claim and its PENDING refund given back, in one statement
-- (RefundStore.Release, conn.releaseKey), in the lock order of the claim:
-- the payment first (locked, with its refund total as the lock returns
-- it), then the key (released, fenced by the token), then the refund,
-- whose amount stops counting.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- The payment of refund @refund, locked first, with its refund total.
refund_payment AS MATERIALIZED (
    SELECT p.id, p.refund_reserved
      FROM payment p
      JOIN refund r ON r.payment_id = p.id
     WHERE r.id = @refund
       FOR NO KEY UPDATE OF p
),
-- clause released: begin
-- The claim deleted, fenced by the lock token, once the payment is
-- locked; it returns the record's recovery point. A request whose lock was
-- taken over matches nothing here, and every other write of the release
-- hangs on this clause.
released AS (
    DELETE FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND EXISTS (SELECT 1 FROM refund_payment)
 RETURNING recovery_point
),
-- clause released: end
-- Only a PENDING refund, and only the one the released key names.
removed AS (
    DELETE FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND id IN (SELECT recovery_point FROM released)
 RETURNING payment_id, amount
),
-- The new total is the locked row's: a statement that waited for the
-- lock reads its other rows as they were before the wait.
given_back AS (
    UPDATE payment p
       SET refund_reserved = t.refund_reserved - r.amount
      FROM removed r, refund_payment t
     WHERE p.id = r.payment_id AND t.id = r.payment_id
)
SELECT EXISTS (SELECT 1 FROM released)
