-- A charge's phase 1 in one statement, one round trip (ChargeStore.Claim):
-- the key's record read, the order matched, the PENDING payment reserved
-- and the key claimed.
--
-- Its answer can be "roll all of it back" (the key is held by another
-- command; the order does not match; a payment in the way), and then
-- nothing of it may stay. So it runs in one of two ways:
--   - @atomic, on the pool: the usual answer, a claimed key with a PENDING
--     payment to charge, commits in one round trip; so does a record in
--     the claim's way, for which nothing is written. Any other answer
--     raises claim_needs_transaction's error, which rolls the whole
--     statement back;
--   - inside a transaction, after such an error: it returns every answer,
--     and the rare ones take further statements before the transaction
--     commits or rolls back.
--
-- The payment is reserved before the key is claimed, so that the claim's
-- insert can carry the payment's id: a statement cannot update a row that
-- one of its own clauses inserted, and the recovery point must be written
-- with the claim. The order of the clauses is also the order of the locks
-- every charge takes (payment, then key), so two charges never wait on
-- each other in a cycle.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause standing: begin
-- The key's record, read first, in the statement's snapshot, so that
-- phase 1's statement is phase 0's read too (decision 0032). stops: the
-- record is one the claim cannot take over, anything but an IN_PROGRESS
-- claim of the same command and hash whose lock has run out (the
-- takeover's condition in claimed, below). Every write below is made only
-- when no record stops the claim: a replay, a reused key or a live claim
-- is answered from this read, having written and locked nothing.
standing AS (
    SELECT command_hash, status, http_status, response::text AS response, recovery_point, lock_token, locked_until, created_at,
           NOT (status = 'IN_PROGRESS'
                AND locked_until < clock_timestamp()
                AND command = 'charge'
                AND command_hash = @hash) AS stops
      FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
),
-- clause standing: end
-- clause matching_order: begin
-- The order the charge must pay exactly: same customer, amount and
-- currency. No row: nothing is reserved, and the application tells an
-- unknown order from a mismatch (422, not stored).
matching_order AS (
    SELECT order_id
      FROM order_projection
     WHERE order_id = @order AND customer_id = @customer
       AND amount = @amount AND currency = @currency
       AND NOT EXISTS (SELECT 1 FROM standing WHERE stops)
),
-- clause matching_order: end
-- clause payment_reserved: begin
-- Reserve the PENDING payment. ON CONFLICT DO NOTHING with no target covers
-- R-DIST-IDEM-4's UNIQUE (payment_provider, external_payment_id) and the
-- third layer's one live payment per order (ux_payment_order_live): under any
-- interleaving the database lets one reservation through, and a conflict
-- waits for the other's commit instead of aborting this transaction.
reserved AS (
    INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method, payment_method)
    SELECT @client, @order, @customer, @provider, @external, @amount, @currency, 'PENDING', @capture_method, NULLIF(@payment_method, '')
      FROM matching_order
        ON CONFLICT DO NOTHING
 RETURNING *
),
-- clause payment_reserved: end
-- clause claimed: begin
-- The key claimed, its recovery point the payment just reserved (the key's
-- lock is the last every command takes). Insert-if-absent, never
-- find-then-save (R-DIST-IDEM-3). The record names its command and its
-- recovery point, the reservation's id (the command knows its table): the
-- jobs and the provider's events know a claim by the two (decision 0038).
-- DO UPDATE is the takeover of a crashed or answer-lost claim: only an
-- IN_PROGRESS record of the same command and command hash whose lock has
-- run out, by the database's clock (the hash covers the operation too,
-- but how a command hashes is its own affair; the name is checked as
-- well). The new lock_token fences the old owner out; a takeover keeps
-- the recovery point it finds. The insert is made only when no record
-- stops the claim: a conflict's DO UPDATE locks the row even when its
-- WHERE says no. The record names the payment in payment_id too, for the
-- previous release's jobs (migration 00024); a claim the previous release
-- made names it there alone, and its takeover makes it the recovery
-- point.
claimed AS (
    INSERT INTO idempotency_record AS r (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, payment_id)
    SELECT @client, @key, 'charge', @hash, 'IN_PROGRESS', @token, clock_timestamp() + @lock_micros * interval '1 microsecond', (SELECT id FROM reserved), (SELECT id FROM reserved)
     WHERE NOT EXISTS (SELECT 1 FROM standing WHERE stops)
        ON CONFLICT (client_id, idempotency_key) DO UPDATE
       SET lock_token = EXCLUDED.lock_token,
           locked_until = EXCLUDED.locked_until,
           recovery_point = coalesce(r.recovery_point, r.payment_id, EXCLUDED.recovery_point),
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
charged AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT p.* FROM payment p JOIN claimed c ON p.id = c.recovery_point
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
       EXISTS (SELECT 1 FROM matching_order) AS order_matches,
       (SELECT saga_id FROM order_projection WHERE order_id = @order) AS saga_id,
-- clause payment_columns: begin
-- The payment, in the order of nullablePaymentRow.targets.
       ch.id AS payment_id, ch.client_id, ch.order_id, ch.customer_id, ch.payment_provider,
       ch.external_payment_id, ch.amount, ch.currency, ch.status, ch.created_at, ch.capture_method, ch.captured_amount, ch.payment_method,
-- clause payment_columns: end
-- clause standing_answers: begin
-- The record in the claim's way, the columns of key_lookup.sql (recordRow),
-- NULL when none stands. Each is named apart from the claim's own answers
-- (payment_id, status), which a reader by name, such as the pgbench
-- ceiling's \gset, would otherwise take from the wrong one.
       st.command_hash AS standing_command_hash, st.status AS standing_status,
       st.http_status AS standing_http_status, st.response AS standing_response,
       st.recovery_point AS standing_recovery_point, st.lock_token AS standing_lock_token,
       st.locked_until AS standing_locked_until, st.created_at AS standing_created_at
-- clause standing_answers: end
  FROM (SELECT 1) AS one
  LEFT JOIN charged ch ON true
  LEFT JOIN standing st ON st.stops
-- clause usual_answer: begin
-- On its own (atomic), keep only a claimed key with a PENDING payment,
-- which is its recovery point, or a record in the claim's way, for which
-- nothing was written; any other answer raises claim_needs_transaction's
-- error (one function for every command's phase 1), which rolls back
-- everything above. CASE, because only CASE fixes the order in which SQL
-- evaluates; coalesce, because a missing payment makes it NULL.
 WHERE CASE WHEN @atomic AND NOT EXISTS (SELECT 1 FROM standing WHERE stops) AND NOT coalesce(
                 EXISTS (SELECT 1 FROM claimed)
             AND ch.status = 'PENDING'
             AND ch.id = (SELECT recovery_point FROM claimed), false)
            THEN claim_needs_transaction()
            ELSE true
       END
-- clause usual_answer: end
