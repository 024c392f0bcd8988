// Package backoff is the pause between attempts at something that keeps
// failing (a broker, a database): exponential from a first pause up to a
// cap, each pause drawn with jitter from [d/2, d] so that replicas that
// fail together do not retry in step.
package backoff

import (
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
