// Package jobs runs the service's background work: the retention purge of
// R-DIST-IDEM-5 (idempotency records, processed events, published outbox
// rows) and the completer of abandoned charges. Each job is an app use case;
// this package adds the schedule, leader election, a log line and metrics
// per run. `payment-service cleanup` runs the same jobs once, by hand.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
)

// Job names, as they appear in logs, metrics and the scheduler.
const (
	// JobPurgeExpired is the retention purge (R-DIST-IDEM-5).
	JobPurgeExpired = "purge-expired"
	// JobCompleteAbandonedCharges is the completer of abandoned charges.
	JobCompleteAbandonedCharges = "complete-abandoned-charges"
)

// Deps is what the jobs need.
type Deps struct {
	// Purge is the retention purge use case.
	Purge *app.PurgeExpired
	// Complete is the completer use case.
	Complete *app.CompleteAbandonedCharges
	// Saga, if set, has its waiting compensations taken up after each
	// completer run, and its steps left unresolved for longer than
	// SagaUnresolvedAfter counted (payment_saga_steps_unresolved).
	Saga *app.SagaSteps
	// SagaUnresolvedAfter: see Saga.
	SagaUnresolvedAfter time.Duration
	// Expire, if set, settles lapsed authorizations after each completer
	// run.
	Expire *app.ExpireLapsedAuthorizations
	// SettleReceived, if set, looks up the modifications a provider
	// received and has not decided, after each completer run.
	SettleReceived *app.SettleReceivedModifications
	// Reconcile, if set, is reconciliation (JobReconcile).
	Reconcile *app.ReconcileBooks
	// ReconcileWindow is how far back a scheduled run looks from the time
	// it runs (RECONCILE_WINDOW).
	ReconcileWindow time.Duration
	// Logger gets one line per run.
	Logger *slog.Logger
	// Registry gets the jobs' metrics.
	Registry prometheus.Registerer
	// Now is the clock the retention cutoffs are taken from; nil means
	// time.Now. Tests set it to place rows exactly around a cutoff.
	Now func() time.Time
}

// Jobs runs each job with its log line and metrics.
type Jobs struct {
	purge    *app.PurgeExpired
	complete *app.CompleteAbandonedCharges
	saga     *app.SagaSteps
	sagaAge  time.Duration
	expire   *app.ExpireLapsedAuthorizations
	received *app.SettleReceivedModifications
	// reconcile is nil when reconciliation is not scheduled.
	reconcile       *app.ReconcileBooks
	reconcileWindow time.Duration
	logger          *slog.Logger
	now             func() time.Time
	m               metrics
}

// New builds the jobs and registers their metrics on d.Registry.
func New(d Deps) *Jobs {
	now := d.Now
	if now == nil {
		now = time.Now
	}
	return &Jobs{purge: d.Purge, complete: d.Complete, saga: d.Saga, sagaAge: d.SagaUnresolvedAfter, expire: d.Expire,
		received: d.SettleReceived, reconcile: d.Reconcile, reconcileWindow: d.ReconcileWindow, logger: d.Logger, now: now, m: newMetrics(d.Registry)}
}

// RunOnce runs every job once, in order: abandoned charges are completed
// first, so a record the completer finishes is not mistaken for one to keep.
// It is `payment-service cleanup`.
func (j *Jobs) RunOnce(ctx context.Context) error {
	return errors.Join(j.CompleteAbandonedCharges(ctx), j.PurgeExpired(ctx))
}

// PurgeExpired runs one retention purge.
func (j *Jobs) PurgeExpired(ctx context.Context) error {
	start := time.Now()
	results, err := j.purge.Handle(ctx, j.now().UTC())
	attrs := []any{"duration", time.Since(start)}
	for _, r := range results {
		j.m.deleted.WithLabelValues(string(r.Table)).Add(float64(r.Deleted))
		attrs = append(attrs, slog.Group(string(r.Table),
			"deleted", r.Deleted, "batches", r.Batches, "cutoff", r.Cutoff, "skipped", r.Skipped))
	}
	j.finish(ctx, JobPurgeExpired, start, err, attrs)
	return err
}

// CompleteAbandonedCharges runs one pass of the completer: the abandoned
// commands (saga steps among them), then the compensations that wait for
// a step it may just have settled.
func (j *Jobs) CompleteAbandonedCharges(ctx context.Context) error {
	start := time.Now()
	res, err := j.complete.Handle(ctx)
	for outcome, n := range map[string]int{"completed": res.Completed, "released": res.Released, "busy": res.Busy, "unknown": res.Unknown, "failed": res.Failed} {
		j.m.abandoned.WithLabelValues(outcome).Add(float64(n))
	}
	attrs := []any{
		"duration", time.Since(start),
		"completed", res.Completed, "released", res.Released, "busy", res.Busy, "unknown", res.Unknown, "failed", res.Failed,
	}
	if j.saga != nil && err == nil {
		var done, waiting, unresolved int
		done, waiting, err = j.saga.CompleteWaitingCompensations(ctx, waitingCompensationsPerRun)
		if err == nil {
			unresolved, err = j.saga.Unresolved(ctx, j.sagaAge)
			j.m.sagaUnresolved.Set(float64(unresolved))
		}
		attrs = append(attrs, "compensations_done", done, "compensations_waiting", waiting, "saga_steps_unresolved", unresolved)
	}
	if j.expire != nil && err == nil {
		var expired app.ExpireResult
		expired, err = j.expire.Handle(ctx)
		for outcome, n := range map[string]int{"expired": expired.Expired, "held": expired.Held, "unknown": expired.Unknown} {
			j.m.authorizations.WithLabelValues(outcome).Add(float64(n))
		}
		attrs = append(attrs, "authorizations_expired", expired.Expired, "authorizations_held", expired.Held, "authorizations_unknown", expired.Unknown)
	}
	if j.received != nil && err == nil {
		var received app.ReceivedResult
		received, err = j.received.Handle(ctx)
		for outcome, n := range map[string]int{"settled": received.Settled, "waiting": received.Waiting, "failed": received.Failed} {
			j.m.received.WithLabelValues(outcome).Add(float64(n))
		}
		attrs = append(attrs, "received_settled", received.Settled, "received_waiting", received.Waiting, "received_failed", received.Failed)
	}
	j.finish(ctx, JobCompleteAbandonedCharges, start, err, attrs)
	return err
}

// waitingCompensationsPerRun bounds the compensations one run takes up.
const waitingCompensationsPerRun = 100

// finish writes the run's log line and metrics.
func (j *Jobs) finish(ctx context.Context, job string, start time.Time, err error, attrs []any) {
	outcome, level := "ok", slog.LevelInfo
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutdown between batches: what was deleted stays deleted, the
		// rest waits for the next run.
		outcome, level = "interrupted", slog.LevelWarn
	case err != nil:
		outcome, level = "error", slog.LevelError
		attrs = append(attrs, "err", err)
	}
	j.m.runs.WithLabelValues(job, outcome).Inc()
	j.m.duration.WithLabelValues(job).Observe(time.Since(start).Seconds())
	j.logger.Log(ctx, level, fmt.Sprintf("job %s finished", job), append([]any{"job", job, "outcome", outcome}, attrs...)...)
}

type metrics struct {
	runs      *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	deleted   *prometheus.CounterVec
	abandoned *prometheus.CounterVec
	// sagaUnresolved is the saga's steps left without a reply, as of the
	// last completer run.
	sagaUnresolved prometheus.Gauge
	// authorizations counts the holds the completer asked about, by what
	// the provider said.
	authorizations *prometheus.CounterVec
	// received counts the received modifications the completer looked up,
	// by what came of it.
	received *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payment_job_runs_total",
			Help: "Background job runs on this replica, by job and outcome (ok, error, interrupted).",
		}, []string{"job", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payment_job_duration_seconds",
			Help:    "Duration of background job runs.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 9), // 10ms .. ~11min
		}, []string{"job"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payment_retention_deleted_rows_total",
			Help: "Rows deleted by the retention purge, by table.",
		}, []string{"table"}),
		abandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payment_abandoned_charges_total",
			Help: "Abandoned charges handled by the completer, by outcome (completed, released, busy, unknown: the provider's answer is still not known, failed).",
		}, []string{"outcome"}),
		authorizations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payment_authorizations_checked_total",
			Help: "Authorized payments whose hold the completer asked the provider about, by outcome (expired: recorded EXPIRED; held; unknown: not known now, asked again).",
		}, []string{"outcome"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payment_received_modifications_checked_total",
			Help: "Captures, voids and refunds a provider received whose event had not come, looked up by the completer, by outcome (settled: the provider's decision recorded; waiting: not decided, not askable, or not known now, asked again; failed).",
		}, []string{"outcome"}),
		sagaUnresolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payment_saga_steps_unresolved",
			Help: "Saga steps without a reply for longer than the completer's grace, as of its last run: a claimed key not yet completed (the provider's outcome unknown), or a compensation waiting for its step.",
		}),
	}
	// Export zeros for every job and outcome: a counter series that first
	// appears at 1 is invisible to increase() and rate(), so an alert on
	// the first failed run would never fire.
	for _, job := range []string{JobPurgeExpired, JobCompleteAbandonedCharges, JobReconcile} {
		for _, outcome := range []string{"ok", "error", "interrupted"} {
			m.runs.WithLabelValues(job, outcome)
		}
	}
	for _, outcome := range []string{"settled", "waiting", "failed"} {
		m.received.WithLabelValues(outcome)
	}
	reg.MustRegister(m.runs, m.duration, m.deleted, m.abandoned, m.sagaUnresolved, m.authorizations, m.received)
	return m
}
