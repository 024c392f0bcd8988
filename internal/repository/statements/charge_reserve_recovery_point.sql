-- The payment phase 1's rare path reserved (charge_reserve.sql) made the
-- claim's recovery point (ChargeStore.Reserve), in the transaction that
-- holds the claim; only while @token owns it.
UPDATE idempotency_record
   SET payment_id = @payment, updated_at = now()
 WHERE client_id = @client AND idempotency_key = @key
   AND status = 'IN_PROGRESS' AND lock_token = @token
