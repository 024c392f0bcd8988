package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/jobs"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/telemetry"
)

// jobsLeaderLockKey is the PostgreSQL advisory lock key whose holder is the
// replica that runs the scheduled jobs ("payments" in ASCII). Advisory locks
// are per database, so it only has to be unique within this service's.
const jobsLeaderLockKey int64 = 0x7061796d656e7473

// abandonedChargesPerRun bounds one completer run; the rest waits a minute.
const abandonedChargesPerRun = 100

// newJobs builds the background jobs over the service's adapters.
func newJobs(cfg config.Config, db *gorm.DB, uc useCases, registry prometheus.Registerer, logger *slog.Logger) *jobs.Jobs {
	retention := repository.NewRetention(db)
	r := cfg.Retention
	return jobs.New(jobs.Deps{
		Purge: app.NewPurgeExpired(jobs.Paced(retention, r.RowsPerSecond), app.RetentionPolicy{
			IdempotencyTTL:  r.IdempotencyTTL,
			ProcessedEvents: r.ProcessedEventRetention,
			PublishedOutbox: r.OutboxRetention,
		}, r.BatchSize),
		// Every command built on the core, each by its name.
		Complete: app.NewCompleteAbandonedCharges(retention, uc.core.Resumable(),
			r.CompleterGrace, abandonedChargesPerRun, logger),
		Saga: uc.sagaSteps,
		// A step is unresolved once the completer should have taken it
		// up: its lock and the completer's grace are over.
		SagaUnresolvedAfter: cfg.IdempotencyLockTimeout + r.CompleterGrace,
		Expire:              app.NewExpireLapsedAuthorizations(uc.chargePayment, cfg.AuthorizationCheckAfter, abandonedChargesPerRun, logger),
		SettleReceived:      app.NewSettleReceivedModifications(uc.refundPayment, cfg.ReceivedLookupAfter, abandonedChargesPerRun, logger, uc.transitions()...),
		Reconcile:           newReconcileBooks(cfg, db, uc.ledger),
		ReconcileWindow:     cfg.Reconciliation.Window,
		Logger:              logger,
		Registry:            registry,
	})
}

// newReconcileBooks is reconciliation over ledger, the provider's books;
// nil when there are none to read.
func newReconcileBooks(cfg config.Config, db *gorm.DB, ledger app.ProviderLedger) *app.ReconcileBooks {
	if ledger == nil {
		return nil
	}
	r := cfg.Reconciliation
	policy := app.ReconcilePolicy{Margin: r.Margin, SettlementLag: r.SettlementLag, PendingBound: r.PendingBound,
		HoldWarning: r.HoldWarning, HoldLifetime: r.HoldLifetime}
	if r.FeePercent != nil {
		policy.Fees = &app.FeePolicy{Percent: *r.FeePercent, Places: 2}
		if r.FeeFixed != nil {
			policy.Fees.Fixed = *r.FeeFixed
		}
	}
	return app.NewReconcileBooks(ledger, repository.NewReconciliation(db), policy)
}

// scheduledJobs are the jobs on their schedule plus the leader lock that
// decides which replica runs them.
type scheduledJobs struct {
	scheduler *jobs.Scheduler
	leader    *repository.LeaderLock
}

func newScheduledJobs(cfg config.Config, db *gorm.DB, j *jobs.Jobs) (*scheduledJobs, error) {
	leader, err := repository.NewLeaderLock(db, jobsLeaderLockKey)
	if err != nil {
		return nil, err
	}
	s, err := jobs.NewScheduler(j, jobs.Schedule{
		PurgeCron:     cfg.Retention.CleanupCron,
		CompleterCron: cfg.Retention.CompleterCron,
		ReconcileCron: cfg.Reconciliation.Cron,
		StopTimeout:   cfg.ShutdownTimeout,
	}, leader)
	if err != nil {
		return nil, err
	}
	return &scheduledJobs{scheduler: s, leader: leader}, nil
}

// stop stops the schedule (waiting for a running job) and then gives up
// leadership, so another replica takes over at its next firing.
func (s *scheduledJobs) stop(ctx context.Context) error {
	err := s.scheduler.Shutdown(ctx)
	return errors.Join(err, s.leader.Close(ctx))
}

// Cleanup runs every background job once against cfg's database: the
// `payment-service cleanup` command. It takes no leadership: the jobs are
// safe to run next to a replica's scheduled run (conditional deletes,
// fenced claims), so an operator can always run it.
func Cleanup(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	db, err := repository.Open(cfg.DatabaseURL, repository.PoolConfig{MaxOpenConns: 4}, logger)
	if err != nil {
		return err
	}
	defer closeDB(db)
	// The same use cases as serve builds: the completer resumes charges
	// through them, and their events go to the configured topic.
	registry := prometheus.NewRegistry()
	uc, err := newUseCases(cfg, db, registry, telemetry.Off(), logger)
	if err != nil {
		return err
	}
	if err := newJobs(cfg, db, uc, registry, logger).RunOnce(ctx); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// Reconcile runs one reconciliation of [from, to) against cfg's database
// and provider, as the scheduled job does, the completer's lookup of the
// lost answers it finds included: the `payment-service reconcile`
// command. With report set, the provider's side is that report (an
// itemized payout reconciliation CSV, internal/provider/payoutreport)
// instead of the provider's API. Like cleanup it takes no leadership: a
// run beside a replica's scheduled one writes its items after it, never
// doubling one.
func Reconcile(ctx context.Context, cfg config.Config, logger *slog.Logger, from, to time.Time, report app.ProviderLedger) (app.ReconciliationRun, error) {
	db, err := repository.Open(cfg.DatabaseURL, repository.PoolConfig{MaxOpenConns: 4}, logger)
	if err != nil {
		return app.ReconciliationRun{}, err
	}
	defer closeDB(db)
	registry := prometheus.NewRegistry()
	uc, err := newUseCases(cfg, db, registry, telemetry.Off(), logger)
	if err != nil {
		return app.ReconciliationRun{}, err
	}
	if report != nil {
		uc.ledger = report
	}
	if uc.ledger == nil {
		return app.ReconciliationRun{}, fmt.Errorf("reconcile: the %s adapter reads no balance transactions; give a report", cfg.PaymentProvider)
	}
	run, err := newJobs(cfg, db, uc, registry, logger).ReconcileWindow(ctx, from, to)
	if err != nil {
		return run, fmt.Errorf("reconcile: %w", err)
	}
	return run, nil
}
