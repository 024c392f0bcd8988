-- The refund phase 1's rare path reserved (refund_reserve.sql) made the
-- claim's recovery point (RefundStore.Reserve), in the transaction that
-- holds the claim; only while @token owns it. The record names the
-- refund in refund_id and its payment in payment_id too, as the claim does
-- (refund_claim.sql, decision 0022).
UPDATE idempotency_record
   SET recovery_point = @refund, refund_id = @refund, payment_id = @payment, updated_at = now()
 WHERE client_id = @client AND idempotency_key = @key
   AND status = 'IN_PROGRESS' AND lock_token = @token
