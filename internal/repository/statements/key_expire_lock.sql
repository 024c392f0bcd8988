-- A claim's lock ended now (Keys.ExpireLock), by the database clock, the
-- clock the claim's takeover condition reads, so the very next claim for
-- the key can take it over; only while @token owns the claim, the fence
-- that keeps a request whose lock was taken over from writing.
UPDATE idempotency_record
   SET locked_until = clock_timestamp(), updated_at = now()
 WHERE client_id = @client AND idempotency_key = @key
   AND status = 'IN_PROGRESS' AND lock_token = @token
