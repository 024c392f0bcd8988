-- A refund's phase 1 in one statement (RefundStore.Claim), run as a
-- charge's claim is (charge_claim.sql): @atomic on the pool, committing
-- only a claimed key with a PENDING refund to make, and raising
-- claim_needs_transaction's error (one function for every command's
-- phase 1) for any other answer; or in a transaction, returning every
-- answer.
--
-- Lock order (docs/adding-a-command.md): the payment (refund_target), then
-- the refund row it inserts (reserved), then the key (claimed), whose
-- recovery point is the refund.
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
-- clause claimed: begin
-- The key claimed, its recovery point the refund just reserved (the key's
-- lock is the last every command takes): insert-if-absent, or the
-- takeover of an IN_PROGRESS claim of the same command and hash whose lock
-- has run out, with a new lock_token that fences the old owner out and
-- the recovery point it finds (charge_claim.sql says it at length). The
-- record names the refund's payment too (payment_id), kept on a takeover
-- like the recovery point: the previous release reads payment_id NULL on
-- any unfinished record as "a charge that reserved nothing" and deletes
-- it, so during a rolling deploy from it a refund's record must not look
-- like one (decision 0022). And it names the refund in refund_id, where a
-- build before migration 00024 looks for it.
claimed AS (
    INSERT INTO idempotency_record AS r (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, refund_id, payment_id)
    VALUES (@client, @key, 'refund', @hash, 'IN_PROGRESS', @token, clock_timestamp() + @lock_micros * interval '1 microsecond', (SELECT id FROM reserved), (SELECT id FROM reserved), (SELECT payment_id FROM reserved))
        ON CONFLICT (client_id, idempotency_key) DO UPDATE
       SET lock_token = EXCLUDED.lock_token,
           locked_until = EXCLUDED.locked_until,
           recovery_point = coalesce(r.recovery_point, EXCLUDED.recovery_point),
           refund_id = coalesce(r.refund_id, EXCLUDED.refund_id),
           payment_id = coalesce(r.payment_id, EXCLUDED.payment_id),
           updated_at = now()
     WHERE r.status = 'IN_PROGRESS'
       AND r.locked_until < clock_timestamp()
       AND r.command = EXCLUDED.command
       AND r.command_hash = EXCLUDED.command_hash
 RETURNING r.recovery_point
),
-- clause claimed: end
-- clause goes_on_with: begin
-- The reservation this command goes on with: the one just reserved, or,
-- after a takeover, the recovery point.
refund_row AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT f.* FROM refund f JOIN claimed c ON f.id = c.recovery_point
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
-- clause goes_on_with: end
-- clause claim_answers: begin
-- The key claimed, the reservation made, and the recovery point the claim
-- holds.
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed,
       EXISTS (SELECT 1 FROM reserved) AS reserved,
       (SELECT recovery_point FROM claimed) AS recovery_point,
-- clause claim_answers: end
       (SELECT o.saga_id FROM order_projection o JOIN payment p ON p.order_id = o.order_id
         WHERE p.id = @payment) AS saga_id,
       f.id, f.payment_id, f.client_id, f.payment_provider, f.external_refund_id, f.amount, f.currency, f.status, f.created_at
  FROM (SELECT 1) AS one
  LEFT JOIN refund_row f ON true
-- clause usual_answer: begin
-- On its own (atomic), keep only a claimed key with a PENDING refund, which
-- is its recovery point; any other answer raises, and the error rolls back
-- everything above (the refund total's increase too).
 WHERE CASE WHEN @atomic AND NOT coalesce(
                 EXISTS (SELECT 1 FROM claimed)
             AND f.status = 'PENDING'
             AND f.id = (SELECT recovery_point FROM claimed), false)
            THEN claim_needs_transaction()
            ELSE true
       END
-- clause usual_answer: end
