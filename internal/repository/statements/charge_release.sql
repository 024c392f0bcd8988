-- A charge's claim and its PENDING payment given back, in one statement
-- (ChargeStore.Release, conn.releaseKey), after the provider did not act:
-- the key first (the charge's claim locks no row before it), then the
-- payment its recovery point names, only if the key was still this
-- token's.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
WITH
-- clause released: begin
-- The claim deleted, fenced by the lock token; it returns the record's
-- recovery point. A request whose lock was taken over matches nothing
-- here, and every other write of the release hangs on this clause. Its
-- guard is true: a charge locks nothing before the key.
released AS (
    DELETE FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND true
 RETURNING recovery_point
),
-- clause released: end
-- Only a PENDING payment, and only the one the released key names.
given_back AS (
    DELETE FROM payment
     WHERE id = @payment AND status = 'PENDING'
       AND id IN (SELECT recovery_point FROM released)
)
SELECT EXISTS (SELECT 1 FROM released)
