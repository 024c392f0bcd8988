package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
)

// The operators' reads (app.ReconciliationReader): runs by id, items by
// what an operator filters on, the open items at a glance. The tables
// hold the exceptions and a row a run, so each read is small.
const (
	reconcileRunSQL  = `SELECT ` + runColumns + ` FROM reconciliation_run r WHERE r.id = @id`
	reconcileRunsSQL = `SELECT ` + runColumns + ` FROM reconciliation_run r
 WHERE @before::bigint = 0 OR r.id < @before ORDER BY r.id DESC LIMIT @limit`
	// reconcileItemsSQL: a filter left empty selects any.
	reconcileItemsSQL = `SELECT ` + itemColumns + ` FROM reconciliation_item i
 WHERE i.id > @after
   AND (@status = '' OR i.status = @status)
   AND (@class = '' OR i.class = @class)
   AND (@currency = '' OR i.our_currency = @currency OR i.their_currency = @currency)
   AND (@run::bigint = 0 OR EXISTS (SELECT 1 FROM reconciliation_finding f WHERE f.run_id = @run AND f.item_id = i.id))
 ORDER BY i.id
 LIMIT @limit`
	reconcileOpenCountsSQL = `SELECT i.class, count(*) FROM reconciliation_item i WHERE i.status = 'open' GROUP BY i.class`
	// reconcileUnmatchedSQL: what an open item leaves unexplained, by
	// currency: the two sides' difference in one currency; else the side
	// that holds something (the provider's, when both do in two).
	reconcileUnmatchedSQL = `
SELECT u.currency, sum(u.amount)
  FROM (SELECT CASE WHEN i.our_currency = i.their_currency OR i.our_currency = '' THEN i.their_currency
                    WHEN i.their_currency = '' THEN i.our_currency
                    ELSE i.their_currency END AS currency,
               CASE WHEN i.our_currency = i.their_currency THEN abs(i.theirs - i.ours)
                    WHEN i.our_currency = '' THEN abs(i.theirs)
                    WHEN i.their_currency = '' THEN abs(i.ours)
                    ELSE abs(i.theirs) END AS amount
          FROM reconciliation_item i
         WHERE i.status = 'open') u
 WHERE u.currency <> ''
 GROUP BY u.currency`
	reconcileLastSuccessSQL = `SELECT max(r.finished_at) FROM reconciliation_run r WHERE r.status = 'succeeded'`
	// reconcileDayRunSQL: a run whose window holds the whole day first.
	reconcileDayRunSQL = `SELECT ` + runColumns + `, (r.window_from <= @day AND r.window_to >= @day_end)
  FROM reconciliation_run r
 WHERE r.status = 'succeeded' AND r.window_from < @day_end AND r.window_to > @day
 ORDER BY 17 DESC, r.id DESC
 LIMIT 1`
)

var (
	reconcileRunStmt         = compileNamed(reconcileRunSQL)
	reconcileRunsStmt        = compileNamed(reconcileRunsSQL)
	reconcileItemsStmt       = compileNamed(reconcileItemsSQL)
	reconcileOpenCountsStmt  = compileNamed(reconcileOpenCountsSQL)
	reconcileUnmatchedStmt   = compileNamed(reconcileUnmatchedSQL)
	reconcileLastSuccessStmt = compileNamed(reconcileLastSuccessSQL)
	reconcileDayRunStmt      = compileNamed(reconcileDayRunSQL)
)

func runTargets(r *app.ReconciliationRun) []any {
	return []any{&r.ID, &r.From, &r.To, &r.Started, &r.Finished, &r.Status, &r.Error, &r.Movements, &r.Payouts,
		&r.Payments, &r.Refunds, &r.Matched, &r.Found, &r.Expected, &r.Opened, &r.Closed}
}

// Run implements app.ReconciliationReader, by the run's primary key.
func (s *Reconciliation) Run(ctx context.Context, id int64) (app.ReconciliationRun, error) {
	var run app.ReconciliationRun
	r, err := queryRow(ctx, s.db, reconcileRunStmt, map[string]any{"id": id})
	if err == nil {
		err = r.Scan(runTargets(&run)...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return run, app.ErrRunNotFound
	}
	if err != nil {
		return run, mapError(fmt.Errorf("read reconciliation run %d: %w", id, err))
	}
	return run, nil
}

// Runs implements app.ReconciliationReader, down the primary key from before.
func (s *Reconciliation) Runs(ctx context.Context, before int64, limit int) ([]app.ReconciliationRun, error) {
	var runs []app.ReconciliationRun
	err := queryRows(ctx, s.db, reconcileRunsStmt, map[string]any{"before": before, "limit": limit}, func(r row) error {
		var run app.ReconciliationRun
		err := r.Scan(runTargets(&run)...)
		runs = append(runs, run)
		return err
	})
	if err != nil {
		return nil, mapError(fmt.Errorf("read reconciliation runs: %w", err))
	}
	return runs, nil
}

// Items implements app.ReconciliationReader, up the primary key from after.
func (s *Reconciliation) Items(ctx context.Context, f app.ItemFilter, after int64, limit int) ([]app.ReconciliationItem, error) {
	status := ""
	if f.Open != nil {
		status = map[bool]string{true: "open", false: "closed"}[*f.Open]
	}
	items, err := scanItems(ctx, s.db, reconcileItemsStmt, map[string]any{"after": after, "status": status,
		"class": string(f.Class), "currency": f.Currency, "run": f.Run, "limit": limit})
	if err != nil {
		return nil, mapError(fmt.Errorf("read reconciliation items: %w", err))
	}
	return items, nil
}

// Stats implements app.ReconciliationReader: the open items' counts and
// amounts over their partial index, the last success over the
// successful runs'.
func (s *Reconciliation) Stats(ctx context.Context) (app.ReconciliationStats, error) {
	st := app.ReconciliationStats{Open: map[app.MismatchClass]int{}, Unmatched: map[string]decimal.Decimal{}}
	for _, c := range app.MismatchClasses {
		st.Open[c] = 0
	}
	err := queryRows(ctx, s.db, reconcileOpenCountsStmt, map[string]any{}, func(r row) error {
		var (
			class app.MismatchClass
			n     int
		)
		err := r.Scan(&class, &n)
		st.Open[class] = n
		return err
	})
	if err == nil {
		err = queryRows(ctx, s.db, reconcileUnmatchedStmt, map[string]any{}, func(r row) error {
			var (
				currency string
				amount   decimal.Decimal
			)
			err := r.Scan(&currency, &amount)
			st.Unmatched[currency] = amount
			return err
		})
	}
	if err == nil {
		var last *time.Time
		var r row
		if r, err = queryRow(ctx, s.db, reconcileLastSuccessStmt, map[string]any{}); err == nil {
			err = r.Scan(&last)
		}
		if last != nil {
			st.LastSuccess = *last
		}
	}
	if err != nil {
		return st, mapError(fmt.Errorf("read reconciliation stats: %w", err))
	}
	return st, nil
}

// DayRun implements app.ReconciliationReader: of the successful runs that
// overlap the day, one that holds it whole first, the latest first.
func (s *Reconciliation) DayRun(ctx context.Context, day time.Time) (app.ReconciliationRun, bool, error) {
	var (
		run   app.ReconciliationRun
		whole bool
	)
	r, err := queryRow(ctx, s.db, reconcileDayRunStmt, map[string]any{"day": day, "day_end": day.Add(24 * time.Hour)})
	if err == nil {
		err = r.Scan(append(runTargets(&run), &whole)...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return run, false, app.ErrRunNotFound
	}
	if err != nil {
		return run, false, mapError(fmt.Errorf("read the run of %s: %w", day.Format(time.DateOnly), err))
	}
	return run, whole, nil
}

var _ app.ReconciliationReader = (*Reconciliation)(nil)
