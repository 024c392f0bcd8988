package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/example/payment-service/internal/backoff"
)

// WakeGap is the least time between two wakes a Waker sends: the most a
// committed event waits for its relay beyond the wake's own round trip.
// Short, because a wake asked for within the gap waits for its end, and a
// saga step's reply waits for its wake: with 10 ms, a step at one client
// waited 4 to 5 ms for its reply to be produced, with 2 ms 0.6 ms, and
// HTTP creates cost the same CPU either way (docs/benchmarks.md, saga
// section). At most 500 notifications a second, each a transaction of a
// few microseconds.
const WakeGap = 2 * time.Millisecond

// Waker tells the relays that outbox rows were committed. Writers call Wake
// after their commit; Run sends one notification (NOTIFY outbox_event) for
// every burst of Wake calls, at most one per WakeGap.
//
// The notification is not sent inside the writing transaction (as a
// trigger on outbox_event would send it): PostgreSQL serializes the commits
// of all transactions that notify, through their WAL flush, on one lock, so
// every charge's phase 3 would wait in line for the one before it: one WAL
// flush per commit where group commit shares one among many, and a third
// of the throughput (docs/benchmarks.md, "CPU per charge beside the
// peers"). Sent after the commit, from one goroutine per replica, the
// notification is one small transaction per burst, and the charges'
// commits do not wait for each other.
//
// A wake is only a hint: a lost one (a crash after the commit, a failed
// notify) costs the relay's poll interval, never an event.
type Waker struct {
	notify func(context.Context) error
	logger *slog.Logger
	kick   chan struct{}
}

// NewWaker returns a Waker that sends its wakes with notify.
func NewWaker(notify func(context.Context) error, logger *slog.Logger) *Waker {
	return &Waker{notify: notify, logger: logger, kick: make(chan struct{}, 1)}
}

// Wake asks for a notification soon. It never blocks: a wake asked for
// while one is pending joins it. A nil Waker does nothing.
func (w *Waker) Wake() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run sends the wakes until ctx ends, and returns nil then.
func (w *Waker) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		}
		if err := w.notify(ctx); err != nil && ctx.Err() == nil {
			// Debug, not warn: during a database outage every burst
			// fails, and the relay's poll makes up for each.
			w.logger.DebugContext(ctx, "outbox waker: notify failed; the relay's poll will find the rows", "err", err)
		}
		if !backoff.Sleep(ctx, WakeGap) {
			return nil
		}
	}
}
