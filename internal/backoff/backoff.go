// Package backoff is the pause between attempts at something that keeps
// failing (a broker, a database): exponential from a first pause up to a
// cap, each pause drawn with jitter from [d/2, d] so that replicas that
// fail together do not retry in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff plans the pauses of one run of failures. It is not safe for
// concurrent use: each retry loop has its own.
type Backoff struct {
	first, max, planned time.Duration
}

// New returns a backoff whose first pause is about first and whose pauses
// grow no longer than max.
func New(first, max time.Duration) *Backoff {
	return &Backoff{first: first, max: max, planned: first}
}

// Next returns the pause to take now, with jitter, and doubles the next
// one, up to the cap.
func (b *Backoff) Next() time.Duration {
	d := b.planned
	b.planned = min(2*b.planned, b.max)
	return Jitter(d)
}

// Reset starts over from the first pause, after a success.
func (b *Backoff) Reset() { b.planned = b.first }

// Jitter returns a pause drawn from [d/2, d].
func Jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// Planned is the pause after the n-th failure in a row (n from 1), before
// jitter: first doubled n-1 times, up to max. It is for a loop that keeps
// no Backoff per run, as when many runs interleave and each knows only its
// count of failures.
func Planned(first, max time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// JitterFrom is Jitter drawing from r: for a run that must be repeatable
// from a seed.
func JitterFrom(r *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

// Sleep pauses for d, or until ctx ends; it reports whether ctx is still
// alive, so a loop stops when it is not.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
