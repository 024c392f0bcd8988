-- Phase 3's second look at the key's lock, in a snapshot of its own
-- (lockStillHeld, after a phase 3 that wrote nothing while its own
-- snapshot still showed the token): whether @token still owns the key.
--
-- Between "-- clause NAME: begin" and "-- clause NAME: end" is a clause
-- other statements have too, kept the same by TestSharedClausesAreTheSame
-- (README.md).
-- clause lock_held: begin
SELECT EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token)
-- clause lock_held: end
