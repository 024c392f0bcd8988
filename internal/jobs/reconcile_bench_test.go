package jobs_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// reconcileDay is how many charges BenchmarkReconcileADay's day holds;
// docs/benchmarks.md runs it with a million.
var (
	reconcileDay     = flag.Int("reconcile-day", 20_000, "charges in BenchmarkReconcileADay's day (and a tenth as many refunds)")
	reconcileHistory = flag.Int("reconcile-history", 2, "days of as many charges before BenchmarkReconcileADay's day, in the tables")
)

// memoryLedger is a provider's books held in memory: the benchmark
// measures our side (PostgreSQL, the comparison, the run's writes), not
// a provider's API.
type memoryLedger struct{ books app.ProviderBooks }

func (l memoryLedger) Books(context.Context, time.Time, time.Time) (app.ProviderBooks, error) {
	return l.books, nil
}

// A day of charges, a tenth of them refunded in part, every one settled
// and paid out in 24 hourly payouts, fees as the contract says:
// reconciled to nothing. One run of the day per iteration: reading both
// sides, the comparison, and the run kept (every run after the first
// also judges the items again: there are none). Reports the run's time,
// its allocations and the heap's peak while it runs; -v logs the plans
// of the window's two statements.
func BenchmarkReconcileADay(b *testing.B) {
	n := *reconcileDay
	ctx := context.Background()
	dsn := testdb.New(b)
	db := pool(b, dsn)
	day := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	// The days before it, then the day: payments and refunds, as the
	// service writes them, in the order it writes them. A day's charge g
	// is pi_<day>_<g>; a tenth of them are refunded 10.00.
	for d := *reconcileHistory; d >= 0; d-- {
		exec(b, db, `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency,
		                                  status, created_at, updated_at, refund_reserved)
		             SELECT 'bench', $4::int * $1 + g, 42, 'sandbox', 'pi_' || $4 || '_' || g, 100.00, 'RUB', 'SUCCEEDED',
		                    $2::timestamptz + g * ($3::float8 / $1) * interval '1 second',
		                    $2::timestamptz + g * ($3::float8 / $1) * interval '1 second' + interval '50 milliseconds',
		                    CASE WHEN g % 10 = 0 THEN 10.00 ELSE 0 END
		               FROM generate_series(1, $1::int) g`, n, day.AddDate(0, 0, -d), float64(24*3600-60), d)
		exec(b, db, `INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status, created_at, updated_at)
		             SELECT p.id, 'bench', 'sandbox', 're_' || p.external_payment_id, 10.00, 'RUB', 'SUCCEEDED',
		                    p.created_at + interval '1 second', p.created_at + interval '1 second'
		               FROM payment p WHERE p.refund_reserved > 0 AND p.external_payment_id LIKE 'pi\_' || $1::int || '\_%'
		              ORDER BY p.id`, d)
	}
	exec(b, db, `ANALYZE payment; ANALYZE refund; ANALYZE payment_transition`)
	b.Logf("the day: %d charges, %d refunds, after %d days of as many, written in %s", n, n/10, *reconcileHistory, time.Since(start).Round(time.Millisecond))

	// The provider's books of the same day.
	fees := &app.FeePolicy{Percent: decimal.RequireFromString("2.9"), Fixed: decimal.RequireFromString("0.30"), Places: 2}
	var ids []int64
	rows, err := db.Query(ctx, `SELECT id FROM payment WHERE external_payment_id LIKE 'pi\_0\_%' ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	books := app.ProviderBooks{Movements: make([]app.ProviderMovement, 0, n+n/10)}
	gross, refund := decimal.RequireFromString("100.00"), decimal.RequireFromString("-10.00")
	fee := fees.Fee(gross)
	payoutOf := func(at time.Time) string { return fmt.Sprintf("po_%02d", at.Sub(day)/time.Hour) }
	net := map[string]decimal.Decimal{}
	for i, id := range ids {
		at := day.Add(time.Duration(float64(i+1) * float64(24*time.Hour-time.Minute) / float64(n)))
		m := app.ProviderMovement{ID: fmt.Sprintf("txn_%d", id), Category: app.CategoryCharge, PaymentRef: fmt.Sprintf("sandbox:pi_0_%d", i+1),
			Gross: gross, Fee: fee, Net: gross.Sub(fee), Currency: "RUB", Created: at, PayoutID: payoutOf(at)}
		books.Movements = append(books.Movements, m)
		net[m.PayoutID] = net[m.PayoutID].Add(m.Net)
		if (i+1)%10 == 0 {
			r := app.ProviderMovement{ID: fmt.Sprintf("txn_re_%d", id), Category: app.CategoryRefund, PaymentRef: m.PaymentRef,
				RefundRef: fmt.Sprintf("refund:sandbox:re_pi_0_%d", i+1), Gross: refund, Net: refund, Currency: "RUB",
				Created: at.Add(time.Second), PayoutID: payoutOf(at.Add(time.Second))}
			books.Movements = append(books.Movements, r)
			net[r.PayoutID] = net[r.PayoutID].Add(r.Net)
		}
	}
	for id, amount := range net {
		books.Payouts = append(books.Payouts, app.Payout{ID: id, Amount: amount, Currency: "RUB", Created: day.Add(24 * time.Hour)})
	}

	gormDB, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, discardLogger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if sqlDB, err := gormDB.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	uc := app.NewReconcileBooks(memoryLedger{books}, repository.NewReconciliation(gormDB), app.ReconcilePolicy{
		Margin: time.Hour, SettlementLag: 15 * time.Minute, PendingBound: time.Hour, HoldWarning: 24 * time.Hour,
		HoldLifetime: 168 * time.Hour, Fees: fees})
	logPlans(b, dsn, day)

	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	var peak uint64
	for b.Loop() {
		stop := samplePeakHeap(&peak)
		run, err := uc.Handle(ctx, day, day.Add(24*time.Hour), day.Add(25*time.Hour))
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if run.Found != 0 || run.Matched != n+n/10 {
			b.Fatalf("the day: %d matched, %d found; want %d and none", run.Matched, run.Found, n+n/10)
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
}

// samplePeakHeap samples the heap in use every 20 ms into peak until stop.
func samplePeakHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > *peak {
				*peak = ms.HeapInuse
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// logPlans logs the plans of the window's statements, as the service's
// pool runs them (enable_seqscan=off).
func logPlans(b *testing.B, dsn string, day time.Time) {
	b.Helper()
	db := pool(b, dsn)
	ctx := context.Background()
	from, to := day.Add(-time.Hour), day.Add(24*time.Hour)
	for _, name := range []string{"reconcile_payments_in_window.sql", "reconcile_refunds_in_window.sql"} {
		text, err := os.ReadFile("../repository/statements/" + name) //nolint:gosec // G304: the repository's own statement
		if err != nil {
			b.Fatal(err)
		}
		q := strings.NewReplacer("@from", "$1", "@to", "$2").Replace(string(text))
		tx, err := db.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			b.Fatal(err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) `+q, from, to)
		if err != nil {
			b.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				b.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		b.Logf("%s:\n%s", name, strings.Join(plan, "\n"))
	}
}
