-- ReconciliationStore.SaveRun (reconciliation.go): the open items the run
-- judged again and did not find are closed by it, unless a run judged
-- them at a later Now (then that run's judgement stands). By key, over
-- ux_reconciliation_item_key.
UPDATE reconciliation_item
   SET status = 'closed', closed_at = @now, closed_run_id = @run, judged_at = @now
 WHERE key = ANY(@keys::text[]) AND status = 'open' AND judged_at <= @now
