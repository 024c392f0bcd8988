package jobs

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
)

// JobReconcile is reconciliation: the provider's books against ours
// (docs/reconciliation.md).
const JobReconcile = "reconcile"

// Reconcile runs one reconciliation of the window that ends now and is
// Deps.ReconcileWindow long: it overlaps the last runs', so a run that
// failed, or a movement the provider showed late, is compared again by
// the next. When it finds money the provider moved for a payment of ours
// still PENDING or AUTHORIZED (a lost answer, missing_in_service), it
// hands it to the completer at once: the completer's lookup asks the
// provider and records what it says, and the next run closes the item.
func (j *Jobs) Reconcile(ctx context.Context) error {
	now := j.now().UTC().Truncate(time.Second)
	_, err := j.ReconcileWindow(ctx, now.Add(-j.reconcileWindow), now)
	return err
}

// ReconcileWindow runs one reconciliation of [from, to), as Reconcile
// does (`payment-service reconcile` runs a window an operator names), and
// returns the run.
func (j *Jobs) ReconcileWindow(ctx context.Context, from, to time.Time) (app.ReconciliationRun, error) {
	start := time.Now()
	run, err := j.reconcile.Handle(ctx, from, to, j.now().UTC())
	attrs := []any{"duration", time.Since(start), "run", run.ID, "from", run.From, "to", run.To,
		"movements", run.Movements, "payouts", run.Payouts, "payments", run.Payments, "refunds", run.Refunds,
		"matched", run.Matched, "found", run.Found, "expected", run.Expected, "opened", run.Opened, "closed", run.Closed,
		"lookups", run.Lookups}
	j.finish(ctx, JobReconcile, start, err, attrs)
	if err == nil && run.Lookups > 0 && j.complete != nil {
		// The completer takes every abandoned command whose grace is over,
		// the lost answers among them, and records the provider's answer.
		err = j.CompleteAbandonedCharges(ctx)
	}
	return run, err
}

// ReconciliationMetrics exports the open items at a glance, read from the
// database at every scrape: every replica reports the same, whichever
// ran the job, and a replica that stopped leading reports no stale value.
//
//	payment_reconciliation_open_items{class}             open items, every class (0 included)
//	payment_reconciliation_unmatched_amount{currency}    what the open items leave unexplained
//	payment_reconciliation_last_success_timestamp_seconds  when the last successful run was kept (0: never)
type ReconciliationMetrics struct {
	reader  app.ReconciliationReader
	logger  *slog.Logger
	timeout time.Duration

	open, unmatched, lastSuccess *prometheus.Desc
}

// NewReconciliationMetrics returns the collector; register it once.
func NewReconciliationMetrics(reader app.ReconciliationReader, logger *slog.Logger) *ReconciliationMetrics {
	return &ReconciliationMetrics{
		reader: reader, logger: logger, timeout: 2 * time.Second,
		open: prometheus.NewDesc("payment_reconciliation_open_items",
			"Reconciliation items open, by class: where the provider's books and ours disagree (docs/reconciliation.md).",
			[]string{"class"}, nil),
		unmatched: prometheus.NewDesc("payment_reconciliation_unmatched_amount",
			"What the open reconciliation items leave unexplained, by currency, in major units.",
			[]string{"currency"}, nil),
		lastSuccess: prometheus.NewDesc("payment_reconciliation_last_success_timestamp_seconds",
			"When the last successful reconciliation run was kept, as a Unix time; 0 if none was.", nil, nil),
	}
}

// Describe implements prometheus.Collector: the three families, whatever the items.
func (m *ReconciliationMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.open
	ch <- m.unmatched
	ch <- m.lastSuccess
}

// Collect implements prometheus.Collector. A database that does not
// answer within the bound leaves the three out of this scrape (logged),
// rather than failing the whole scrape.
func (m *ReconciliationMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	st, err := m.reader.Stats(ctx)
	if err != nil {
		m.logger.WarnContext(ctx, "reconciliation metrics: cannot read the items", "err", err)
		return
	}
	for _, c := range app.MismatchClasses {
		ch <- prometheus.MustNewConstMetric(m.open, prometheus.GaugeValue, float64(st.Open[c]), string(c))
	}
	for currency, amount := range st.Unmatched {
		ch <- prometheus.MustNewConstMetric(m.unmatched, prometheus.GaugeValue, amount.InexactFloat64(), currency)
	}
	last := 0.0
	if !st.LastSuccess.IsZero() {
		last = float64(st.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(m.lastSuccess, prometheus.GaugeValue, last)
}
