-- The refund recorded under an external refund id (externalRefund): the
-- row that a reservation's insert met after its snapshot was taken, which
-- only a new statement sees (refund_reserve.sql).
SELECT id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status, created_at
  FROM refund
 WHERE payment_provider = @provider AND external_refund_id = @external
