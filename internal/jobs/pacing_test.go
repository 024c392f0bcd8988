package jobs

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
)

func TestPauseAfterKeepsTheAverageRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		rows          int
		took          time.Duration
		rowsPerSecond int
		want          time.Duration
	}{
		{"a fast batch waits out its share", 5000, 100 * time.Millisecond, 10_000, 400 * time.Millisecond},
		{"an instant batch waits its whole share", 5000, 0, 10_000, 500 * time.Millisecond},
		{"a batch that used its share exactly", 5000, 500 * time.Millisecond, 10_000, 0},
		{"a slow batch gets no pause, and no debt", 5000, 2 * time.Second, 10_000, 0},
		{"a rate above the batch size", 5000, 10 * time.Millisecond, 100_000, 40 * time.Millisecond},
		{"one row a second", 1, 0, 1, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := pauseAfter(tc.rows, tc.took, tc.rowsPerSecond); got != tc.want {
				t.Errorf("pauseAfter(%d, %s, %d) = %s, want %s", tc.rows, tc.took, tc.rowsPerSecond, got, tc.want)
			}
		})
	}
}

// backlog is an app.Retention over counted rows: each call deletes up to
// limit of them and takes tookPerBatch on the test's clock; failAt > 0
// fails that call.
type backlog struct {
	rows, calls, failAt int
	clock               *time.Time
	tookPerBatch        time.Duration
}

func (b *backlog) DeleteExpiredBatch(_ context.Context, _ app.RetentionTable, _ time.Time, limit int) (int, error) {
	b.calls++
	if b.calls == b.failAt {
		return 0, errors.New("connection lost")
	}
	n := min(limit, b.rows)
	b.rows -= n
	*b.clock = b.clock.Add(b.tookPerBatch)
	return n, nil
}

// The purge pauses after every full batch and never after the last one
// (the table is done) or a failed one; each pause is the batch's share
// minus what the delete took.
func TestPacedPurgePausesBetweenFullBatchesOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rows       int
		failAt     int
		want       []time.Duration
		wantRows   int // the purge's Deleted
		wantErrors bool
	}{
		{"three full batches and a short one", 3500, 0, []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond}, 3500, false},
		{"an exact multiple ends with an empty batch", 2000, 0, []time.Duration{80 * time.Millisecond, 80 * time.Millisecond}, 2000, false},
		{"a short first batch: no pause at all", 999, 0, nil, 999, false},
		{"a failed batch: no pause after it", 5000, 2, []time.Duration{80 * time.Millisecond}, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
			store := &backlog{rows: tc.rows, failAt: tc.failAt, clock: &clock, tookPerBatch: 20 * time.Millisecond}
			var pauses []time.Duration
			paced := Paced(store, 10_000).(*pacedRetention)
			paced.now = func() time.Time { return clock }
			paced.wait = func(_ context.Context, d time.Duration) bool { pauses = append(pauses, d); return true }

			uc := app.NewPurgeExpired(paced, defaultPolicyForPacing, 1000)
			results, err := uc.Handle(context.Background(), clock)
			if (err != nil) != tc.wantErrors {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErrors)
			}
			if results[0].Deleted != tc.wantRows {
				t.Errorf("deleted %d rows, want %d", results[0].Deleted, tc.wantRows)
			}
			// The other two tables find an empty backlog: one short batch
			// each, no pause.
			if !slices.Equal(pauses, tc.want) {
				t.Errorf("pauses = %v, want %v", pauses, tc.want)
			}
		})
	}
}

func TestPacedWithoutARateIsTheStoreItself(t *testing.T) {
	t.Parallel()
	store := &backlog{}
	for _, rate := range []int{0, -1} {
		if got := Paced(store, rate); got != app.Retention(store) {
			t.Errorf("Paced(store, %d) = %T, want the store unwrapped", rate, got)
		}
	}
}

var defaultPolicyForPacing = app.RetentionPolicy{IdempotencyTTL: 72 * time.Hour, ProcessedEvents: 7 * 24 * time.Hour, PublishedOutbox: 24 * time.Hour}
