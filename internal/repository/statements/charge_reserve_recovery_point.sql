-- The payment phase 1's rare path reserved (charge_reserve.sql) made the
-- claim's recovery point (ChargeStore.Reserve), in the transaction that
-- holds the claim; only while @token owns it. The record names the
-- payment in payment_id too, as the claim does (charge_claim.sql).
UPDATE idempotency_record
   SET recovery_point = @payment, payment_id = @payment, updated_at = now()
 WHERE client_id = @client AND idempotency_key = @key
   AND status = 'IN_PROGRESS' AND lock_token = @token
