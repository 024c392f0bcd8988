-- A refund's reservation alone, one row whatever happened (reserveRefund,
-- RefundStore.Reserve): phase 1's rare path, in the transaction that has
-- claimed the key, saying what stands in the way.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause refund_reservation: begin
-- The payment to refund, if it is the calling client's, locked before
-- anything else is written (the lock order of every command: payment
-- first). Under READ COMMITTED a lock that had to wait returns the row as
-- the previous holder committed it, so refundable and fits are computed on
-- the current refund total: concurrent refunds of one payment queue here,
-- and each sees what those before it reserved. NO KEY UPDATE is the lock
-- the UPDATE below takes anyway; it leaves foreign-key checks (KEY SHARE)
-- of rows that reference the payment free to go on.
refund_target AS MATERIALIZED (
    SELECT id, amount, refund_reserved,
           status = 'SUCCEEDED' AND currency = @currency AND payment_provider = @provider AS refundable,
           refund_reserved + @amount <= coalesce(captured_amount, amount) AS fits
      FROM payment
     WHERE id = @payment AND client_id = @client
       FOR NO KEY UPDATE
),
-- Insert the PENDING refund, only for a refundable payment whose refund
-- total has room for it. DO NOTHING on a conflict with the refund's second
-- layer, UNIQUE (payment_provider, external_refund_id): a concurrent insert
-- of the same external refund is waited for, never a second row, and no
-- error aborts a transaction the statement runs in.
reserved AS (
    INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
    SELECT id, @client, @provider, @external, @amount, @currency, 'PENDING'
      FROM refund_target
     WHERE refundable AND fits
        ON CONFLICT (payment_provider, external_refund_id) DO NOTHING
 RETURNING *
),
-- Add the refund to the payment's total only for a refund row actually
-- inserted: an external refund that exists reserves nothing. The row is
-- the one refund_target locked; the CHECK on refund_reserved is the
-- backstop should fits ever be wrong. The new total is the locked row's
-- (t), the one fits was computed on. This UPDATE's own scan of payment
-- reads the statement's snapshot, which after a wait for the lock is older
-- than the row; PostgreSQL checks the CHECK on the new row computed from
-- it before it meets the concurrent update and recomputes, so a
-- reservation that waited while a decline gave 100.00 back failed with
-- 100.00 + 100.00 > amount (TestRefundReservedAfterWaitingForADecline;
-- after a release or a decline: TestReservationAfterAWaitedGiveBack).
refund_counted AS (
    UPDATE payment p
       SET refund_reserved = t.refund_reserved + r.amount
      FROM reserved r, refund_target t
     WHERE p.id = r.payment_id AND t.id = r.payment_id
 RETURNING p.refund_reserved
),
-- The external refund as already recorded, whoever's it is: the caller
-- answers a retry of the same refund with it, and anything else as a
-- conflict that reveals nothing.
refund_existing AS (
    SELECT * FROM refund
     WHERE payment_provider = @provider AND external_refund_id = @external
),
-- clause refund_reservation: end
-- The refund reserved, or the one already recorded under its external
-- refund id as the statement's snapshot sees it. When reserved is empty
-- although refund_target is refundable and fits, the insert met a row
-- committed after the snapshot, which only a new statement sees
-- (refund_external.sql).
refund_row AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT * FROM refund_existing
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
SELECT EXISTS (SELECT 1 FROM reserved) AS reserved,
       EXISTS (SELECT 1 FROM refund_target) AS payment_found,
       coalesce((SELECT refundable FROM refund_target), false) AS refundable,
       coalesce((SELECT fits FROM refund_target), false) AS fits,
       coalesce((SELECT refund_reserved FROM refund_counted), (SELECT refund_reserved FROM refund_target)) AS refund_reserved,
       r.id, r.payment_id, r.client_id, r.payment_provider, r.external_refund_id, r.amount, r.currency, r.status, r.created_at
  FROM (SELECT 1) AS one
  LEFT JOIN refund_row r ON true
