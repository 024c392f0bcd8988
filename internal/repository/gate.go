package repository

import (
	"context"
	"fmt"
)

// Gate lets at most n callers use the connection pool at once and queues
// the others in the order they came.
//
// database/sql hands a freed connection to a random waiter (its
// connRequestSet.TakeRandom). Under saturation, more charges in flight
// than connections, that makes the wait a lottery: most requests get a
// connection at once and a few wait turn after turn, and the p99 runs away
// from the p50. Waiting here instead, where goroutines blocked on a channel
// are served first come first served, makes every request wait its turn
// once. The gate's size is the pool's, so the pool itself never has a
// waiter. A nil *Gate lets everyone through.
type Gate struct {
	slots chan struct{}
}

// NewGate returns a gate for a pool of n connections.
func NewGate(n int) *Gate {
	return &Gate{slots: make(chan struct{}, n)}
}

// enter waits for a slot, or until ctx ends (ErrStoreUnavailable then: the
// database did not answer in time, as far as the caller can tell).
func (g *Gate) enter(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return mapError(fmt.Errorf("waiting for a database connection: %w", ctx.Err()))
	}
}

// leave gives the slot back.
func (g *Gate) leave() {
	if g != nil {
		<-g.slots
	}
}
