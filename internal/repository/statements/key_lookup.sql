-- Phase 0 of every command (Keys.Lookup): the key's record, read with no
-- lock and no transaction. A replay of a completed key, a reused key, or a
-- duplicate meeting a live lock is answered from this one read and writes
-- nothing. Only an absent record, or a claim whose lock has run out, goes
-- on to the command's claim. Its columns are recordRow's, as the charge's
-- claim's standing answers are.
SELECT command_hash, status, http_status, response::text, recovery_point, lock_token, locked_until, created_at
  FROM idempotency_record
 WHERE client_id = @client AND idempotency_key = @key
