package service

import (
	"context"
	"time"
)

// abortGrace is how long the charges aborted at the end of a shutdown get
// to return. An aborted provider call returns at once (its context is
// cancelled); the charge then records what it can (ending its lock early,
// so the client's retry takes over at once), which ChargePayment bounds by
// 10s. With the default SHUTDOWN_TIMEOUT of 15s that still fits an
// orchestrator's usual 30s grace.
const abortGrace = 11 * time.Second

// drainCharges waits, until ctx (the shutdown's bound) ends, for the charges
// still running in this process, then aborts the rest and logs their keys:
// each is left claimed with its reserved payment, for the client's retry
// once the lock expires or for the completer (README, SHUTDOWN_TIMEOUT). It
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
