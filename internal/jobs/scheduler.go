package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
)

// Schedule says when the jobs run. Specs are cron with a seconds field,
// evaluated in UTC.
type Schedule struct {
	// PurgeCron is when the retention purge runs (IDEMPOTENCY_CLEANUP_CRON).
	PurgeCron string
	// CompleterCron is when the completer runs (CHARGE_COMPLETER_CRON).
	CompleterCron string
	// ReconcileCron is when reconciliation runs (RECONCILE_CRON), if
	// the jobs have it.
	ReconcileCron string
	// StopTimeout bounds how long Shutdown waits for a running job.
	StopTimeout time.Duration
}

// Scheduler runs the jobs on their schedule, on the leader replica only.
type Scheduler struct {
	s gocron.Scheduler
}

// NewScheduler schedules j. Only the replica that elector names the leader
// runs a job (see repository.LeaderLock); on every replica a job never
// overlaps a still-running run of itself.
func NewScheduler(j *Jobs, sch Schedule, elector gocron.Elector) (*Scheduler, error) {
	s, err := gocron.NewScheduler(
		gocron.WithLocation(time.UTC),
		gocron.WithDistributedElector(elector),
		gocron.WithStopTimeout(sch.StopTimeout),
	)
	if err != nil {
		return nil, err
	}
	type scheduled struct {
		name, cron string
		run        func(context.Context) error
	}
	all := []scheduled{
		{JobPurgeExpired, sch.PurgeCron, j.PurgeExpired},
		{JobCompleteAbandonedCharges, sch.CompleterCron, j.CompleteAbandonedCharges},
	}
	if j.reconcile != nil && sch.ReconcileCron != "" {
		all = append(all, scheduled{JobReconcile, sch.ReconcileCron, j.Reconcile})
	}
	for _, job := range all {
		// gocron hands the job a context that ends on Shutdown; the use
		// cases stop between batches when it does.
		_, err := s.NewJob(gocron.CronJob(job.cron, true),
			gocron.NewTask(func(ctx context.Context) error { return job.run(ctx) }),
			gocron.WithName(job.name),
			gocron.WithSingletonMode(gocron.LimitModeReschedule),
		)
		if err != nil {
			_ = s.Shutdown()
			return nil, fmt.Errorf("schedule %s at %q: %w", job.name, job.cron, err)
		}
	}
	return &Scheduler{s: s}, nil
}

// Start starts the schedule; it returns at once.
func (s *Scheduler) Start() { s.s.Start() }

// Shutdown stops the schedule, cancels the running jobs' context and waits
// for them until they return or ctx ends.
func (s *Scheduler) Shutdown(ctx context.Context) error { return s.s.ShutdownWithContext(ctx) }
