-- ReconciliationStore.BookedInWindow (reconciliation.go): our payments
-- reserved in [@from, @to), and those whose capture or void was reserved
-- then (a capture decides its payment days after the authorization). A
-- record is decided after it is reserved, so these are all that can have
-- been decided in the window, and every PENDING one reserved in it.
--
-- Each half reads a BRIN index on created_at (00027): the rows of a day
-- are a few block ranges of the table, however long its history. The
-- second half leaves out the payments the first one read.
SELECT p.id, p.payment_provider, p.external_payment_id, p.status, p.amount, p.captured_amount, p.currency,
       p.created_at, p.updated_at
  FROM payment p
 WHERE p.created_at >= @from AND p.created_at < @to
UNION ALL
SELECT p.id, p.payment_provider, p.external_payment_id, p.status, p.amount, p.captured_amount, p.currency,
       p.created_at, p.updated_at
  FROM payment_transition t
  JOIN payment p ON p.id = t.payment_id
 WHERE t.created_at >= @from AND t.created_at < @to
   AND NOT (p.created_at >= @from AND p.created_at < @to)
