package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// stopWriters stops everything that writes to the database, side by side,
// each within its own bound: the scheduled jobs (ShutdownJobsTimeout), the
// consumers (ShutdownConsumerTimeout), and the HTTP server, whose
// in-flight requests drain, followed by the charges they started
// (ShutdownTimeout for both). Side by side, a stage stuck until its bound
// delays the others' end by nothing, and the shutdown by at most its own
// bound. It reports whether the database pool may close (drainCharges) and
// the stages' errors.
func (s *Service) stopWriters(ctx context.Context, consumers ...*background) (poolFree bool, err error) {
	httpCtx, cancel := s.stageContext(ctx, "http drain", s.cfg.ShutdownTimeout)
	defer cancel()
	var (
		wg               sync.WaitGroup
		jobsErr, httpErr error
	)
	wg.Go(func() {
		jobsCtx, cancel := s.stageContext(ctx, "jobs", s.cfg.ShutdownJobsTimeout)
		defer cancel()
		if jobsErr = s.jobs.stop(jobsCtx); jobsErr != nil {
			jobsErr = fmt.Errorf("jobs shutdown: %w", jobsErr)
		}
	})
	for _, c := range consumers {
		wg.Go(func() {
			if c == nil {
				return
			}
			consumerCtx, cancel := s.stageContext(ctx, c.name, s.cfg.ShutdownConsumerTimeout)
			defer cancel()
			c.stop(consumerCtx)
		})
	}
	wg.Go(func() {
		if httpErr = s.server.Shutdown(httpCtx); httpErr != nil {
			httpErr = fmt.Errorf("http shutdown: %w", httpErr)
		}
	})
	wg.Wait()
	// Only now can no new charge start (the completer is a job, the
	// saga's commands come through a consumer). Charges
	// outlive their requests' handlers only if the HTTP drain's bound ran
	// out; they are aborted and logged, never left under a closed pool.
	poolFree = s.drainCharges(httpCtx)
	return poolFree, errors.Join(jobsErr, httpErr)
}

// stopRelay gives the outbox relay, once every writer has stopped, its own
// bound (ShutdownRelayTimeout) to publish what they committed, then stops
// it. Whatever it could not publish in time stays in the outbox for the
// next leader: late, never lost.
func (s *Service) stopRelay(ctx context.Context, relay *background) {
	if relay == nil {
		return
	}
	relayCtx, cancel := s.stageContext(ctx, "outbox relay", s.cfg.ShutdownRelayTimeout)
	defer cancel()
	if err := s.relay.Flush(relayCtx); err != nil {
		s.logger.Warn("outbox relay: events committed before the shutdown are left in the outbox for the next leader", "err", err)
	}
	relay.stop(relayCtx)
}

// stageContext is the context of one shutdown stage: ctx bounded by d. It
// logs when the stage runs out of its bound, naming the stage.
func (s *Service) stageContext(ctx context.Context, stage string, d time.Duration) (context.Context, context.CancelFunc) {
	stageCtx, cancel := context.WithTimeout(ctx, d)
	stop := context.AfterFunc(stageCtx, func() {
		if errors.Is(stageCtx.Err(), context.DeadlineExceeded) {
			s.logger.Warn("shutdown stage ran out of its bound", "stage", stage, "bound", d)
		}
	})
	return stageCtx, func() {
		stop()
		cancel()
	}
}

// abortGrace is how long the charges aborted at the end of a shutdown get
// to return. An aborted provider call returns at once (its context is
// cancelled); the charge then records what it can (ending its lock early,
// so the client's retry takes over at once), which ChargePayment bounds by
// 10s. With the default SHUTDOWN_TIMEOUT of 15s, and the relay's 3s after
// it (stopRelay), that still fits an orchestrator's usual 30s grace.
const abortGrace = 11 * time.Second

// drainCharges waits, until ctx (the shutdown's bound) ends, for the charges
// still running in this process, then aborts the rest and logs their keys:
// each is left claimed with its reserved payment, for the client's retry
// once the lock expires or for the completer (docs/operations.md, SHUTDOWN_TIMEOUT). It
// reports whether no charge runs any more, which is when the database pool
// may close: never under a running charge.
func (s *Service) drainCharges(ctx context.Context) (poolFree bool) {
	res := s.commands.Drain(ctx, abortGrace)
	for _, scope := range res.Aborted {
		s.logger.Warn("shutdown timeout: charge aborted and left to the takeover by the client's retry after its lock expires, or to the completer",
			"client_id", scope.ClientID, "idempotency_key", scope.Key, "lock_timeout", s.cfg.IdempotencyLockTimeout)
	}
	for _, scope := range res.StillRunning {
		s.logger.Error("charge still running after its abort; the database pool is left open for it, the process exit ends it",
			"client_id", scope.ClientID, "idempotency_key", scope.Key)
	}
	return len(res.StillRunning) == 0
}
