package jobs

import (
	"context"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/backoff"
)

// Paced wraps the purge's store so that a purge deletes at most
// rowsPerSecond rows a second (CLEANUP_ROWS_PER_SECOND): after each full
// batch it pauses for whatever is left of that batch's share of a second.
// The purge shares the database's cores with the charges; flat out it took
// a third of their throughput on a 2-core machine (docs/benchmarks.md,
// "Purge under load"), while a day's backlog needs only a small fraction of
// its speed. rowsPerSecond <= 0 returns store itself: no pause.
func Paced(store app.Retention, rowsPerSecond int) app.Retention {
	if rowsPerSecond <= 0 {
		return store
	}
	return &pacedRetention{store: store, rowsPerSecond: rowsPerSecond, now: time.Now, wait: backoff.Sleep}
}

// pacedRetention is Paced's store. now and wait are the clock and the
// pause, replaced in tests.
type pacedRetention struct {
	store         app.Retention
	rowsPerSecond int
	now           func() time.Time
	wait          func(context.Context, time.Duration) bool
}

// DeleteExpiredBatch deletes one batch, then, if the batch was full (so
// the purge goes on), pauses. The pause comes after the batch's commit, so
// no lock or snapshot is held through it. A ctx that ends during the pause
// cuts it short; the purge stops before its next batch (app.PurgeExpired
// checks ctx).
func (p *pacedRetention) DeleteExpiredBatch(ctx context.Context, table app.RetentionTable, cutoff time.Time, limit int) (int, error) {
	started := p.now()
	n, err := p.store.DeleteExpiredBatch(ctx, table, cutoff, limit)
	if err != nil || n < limit {
		return n, err // the table is done (or failed): nothing to yield to
	}
	if pause := pauseAfter(n, p.now().Sub(started), p.rowsPerSecond); pause > 0 {
		p.wait(ctx, pause)
	}
	return n, nil
}

// pauseAfter is how long to pause after a batch of rows that took took, so
// that the purge averages rowsPerSecond: the batch's share of time is
// rows/rowsPerSecond seconds, of which the delete itself used took. A batch
// slower than its share gets no pause (and the purge runs below the rate:
// the database is busy, and the pacing never makes up for lost time with a
// burst).
func pauseAfter(rows int, took time.Duration, rowsPerSecond int) time.Duration {
	share := time.Duration(rows) * time.Second / time.Duration(rowsPerSecond)
	return max(share-took, 0)
}
