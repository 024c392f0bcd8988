-- ReconciliationStore.SaveRun (reconciliation.go): each mismatch the run
-- found becomes, or stays, an open item under its key, and the run's
-- finding of it is kept. The arrays are parallel, one element a mismatch,
-- in key order: every run locks the rows it writes in the same order. The
-- amounts come as decimal strings, numeric only here.
--
-- An item another run judged at a later Now is left as that run wrote it
-- (the WHERE of DO UPDATE): of two runs that overlap, the later one's
-- judgement stands, whichever commits last. A closed item found again is
-- open again; its first run and first sighting stay.
WITH found AS (
    INSERT INTO reconciliation_item AS i
           (key, class, subject, ref, payment_id, refund_id, provider_id, ours, our_currency, theirs, their_currency,
            detail, status, first_run_id, last_run_id, first_seen_at, last_seen_at, judged_at)
    SELECT m.key, m.class, m.subject, m.ref, nullif(m.payment_id, 0), nullif(m.refund_id, 0), m.provider_id,
           m.ours::numeric, m.our_currency, m.theirs::numeric, m.their_currency, m.detail, 'open', @run, @run, @now, @now, @now
      FROM unnest(@keys::text[], @classes::text[], @subjects::text[], @refs::text[], @payment_ids::bigint[],
                  @refund_ids::bigint[], @provider_ids::text[], @ours::text[], @our_currencies::text[],
                  @theirs::text[], @their_currencies::text[], @details::text[])
           AS m (key, class, subject, ref, payment_id, refund_id, provider_id, ours, our_currency, theirs,
                 their_currency, detail)
     ORDER BY m.key
        ON CONFLICT (key) DO UPDATE
       SET class = excluded.class, subject = excluded.subject, ref = excluded.ref,
           payment_id = excluded.payment_id, refund_id = excluded.refund_id, provider_id = excluded.provider_id,
           ours = excluded.ours, our_currency = excluded.our_currency,
           theirs = excluded.theirs, their_currency = excluded.their_currency, detail = excluded.detail,
           status = 'open', closed_at = NULL, closed_run_id = NULL,
           last_run_id = excluded.last_run_id, last_seen_at = excluded.last_seen_at, judged_at = excluded.judged_at
     WHERE i.judged_at <= excluded.judged_at
    RETURNING i.id)
INSERT INTO reconciliation_finding (run_id, item_id)
SELECT @run, id FROM found
