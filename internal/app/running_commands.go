package app

import (
	"context"
	"sync"
	"time"
)

// runningCommands tracks the commands on the core in flight in this
// process, so that a shutdown can wait for them, and abort the ones that
// outlast it, before it closes the database pool under them.
//
// Aborting is safe at any point of a command, because it is exactly what a
// crash does at that point, minus the crash: the command's context is
// cancelled, so its next database or provider call fails and it writes
// nothing more. Phase 1 rolls back (nothing happened); after it, the key
// stays claimed with its PENDING reservation, the recovery point that the
// client's retry takes over once the lock expires, or that the completer
// finishes, asking the provider again with the same provider key.
type runningCommands struct {
	abort    context.Context // cancelled by abortAll
	abortAll context.CancelFunc

	mu      sync.Mutex
	next    uint64
	running map[uint64]IdempotencyScope
	changed chan struct{} // closed and replaced whenever a command ends
}

func newRunningCommands() *runningCommands {
	abort, abortAll := context.WithCancel(context.Background())
	return &runningCommands{abort: abort, abortAll: abortAll, running: map[uint64]IdempotencyScope{}, changed: make(chan struct{})}
}

// start registers a command for scope and returns its context: detached
// from the request (a client that goes away must not cut a claimed command
// short), bounded by the lock timeout, and cancelled by abortAll. done must
// be called when the command returns.
func (r *runningCommands) start(parent context.Context, scope IdempotencyScope, timeout time.Duration) (ctx context.Context, done func()) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	stop := context.AfterFunc(r.abort, cancel)
	r.mu.Lock()
	id := r.next
	r.next++
	r.running[id] = scope
	r.mu.Unlock()
	return ctx, func() {
		stop()
		cancel()
		r.mu.Lock()
		delete(r.running, id)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// wait blocks until no command runs or ctx ends, and returns the scopes of
// the commands still running.
func (r *runningCommands) wait(ctx context.Context) []IdempotencyScope {
	for {
		r.mu.Lock()
		if len(r.running) == 0 {
			r.mu.Unlock()
			return nil
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			left := make([]IdempotencyScope, 0, len(r.running))
			for _, s := range r.running {
				left = append(left, s)
			}
			return left
		}
	}
}

// DrainResult is what Drain found.
type DrainResult struct {
	// Aborted are the keys of the commands that were still running when the
	// drain's time ran out, and were aborted: each is left claimed, for the
	// client's retry after its lock expires or for the completer.
	Aborted []IdempotencyScope
	// StillRunning are commands that had not returned even after the abort
	// and its grace; the database pool must not be closed under them.
	StillRunning []IdempotencyScope
}

// Drain waits for the commands running in this process until ctx ends. It
// then aborts those still running (see runningCommands), waits up to grace
// for them to return, and reports them. New commands started after the
// abort are cancelled at once. Call it once no new request can arrive.
func (c *Core) Drain(ctx context.Context, grace time.Duration) DrainResult {
	left := c.running.wait(ctx)
	if len(left) == 0 {
		return DrainResult{}
	}
	c.running.abortAll()
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return DrainResult{Aborted: left, StillRunning: c.running.wait(graceCtx)}
}
