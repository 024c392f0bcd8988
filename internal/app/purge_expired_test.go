package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
)

// fakeRetention has rows[table] expired rows and deletes them limit at a
// time; afterBatch runs after each batch.
type fakeRetention struct {
	rows       map[app.RetentionTable]int
	cutoffs    map[app.RetentionTable][]time.Time
	calls      int
	afterBatch func()
}

func (f *fakeRetention) DeleteExpiredBatch(_ context.Context, table app.RetentionTable, cutoff time.Time, limit int) (int, error) {
	n, ok := f.rows[table]
	if !ok {
		return 0, app.ErrRetentionTableAbsent
	}
	f.calls++
	f.cutoffs[table] = append(f.cutoffs[table], cutoff)
	n = min(n, limit)
	f.rows[table] -= n
	if f.afterBatch != nil {
		f.afterBatch()
	}
	return n, nil
}

var policy = app.RetentionPolicy{IdempotencyTTL: 72 * time.Hour, ProcessedEvents: 168 * time.Hour, PublishedOutbox: 24 * time.Hour}

func TestPurgeExpiredBatchesEachTableWithACutoffFixedAtTheStart(t *testing.T) {
	t.Parallel()
	store := &fakeRetention{
		rows:    map[app.RetentionTable]int{app.TableIdempotencyRecord: 25, app.TableProcessedEvent: 10},
		cutoffs: map[app.RetentionTable][]time.Time{},
	}
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	results, err := app.NewPurgeExpired(store, policy, 10).Handle(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	want := []app.PurgeResult{
		{Table: app.TableIdempotencyRecord, Cutoff: now.Add(-72 * time.Hour), Deleted: 25, Batches: 3},
		// A full last batch needs one more (empty) statement to know it was the last.
		{Table: app.TableProcessedEvent, Cutoff: now.Add(-168 * time.Hour), Deleted: 10, Batches: 2},
		{Table: app.TableOutboxEvent, Cutoff: now.Add(-24 * time.Hour), Skipped: true},
		// The saga's steps go with their keys, after the idempotency TTL.
		{Table: app.TableSagaStep, Cutoff: now.Add(-72 * time.Hour), Skipped: true},
	}
	if len(results) != len(want) {
		t.Fatalf("results = %+v", results)
	}
	for i := range want {
		if results[i] != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, results[i], want[i])
		}
	}
	for table, cutoffs := range store.cutoffs {
		for _, c := range cutoffs {
			if c != cutoffs[0] {
				t.Errorf("%s: the cutoff moved during the run: %v", table, cutoffs)
			}
		}
	}
}

// Shutdown stops the purge between batches: the batch in flight finishes,
// no new one starts, and the caller learns it was interrupted.
func TestPurgeExpiredStopsBetweenBatchesWhenCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &fakeRetention{
		rows:    map[app.RetentionTable]int{app.TableIdempotencyRecord: 1000, app.TableProcessedEvent: 1000},
		cutoffs: map[app.RetentionTable][]time.Time{},
	}
	store.afterBatch = func() {
		if store.calls == 2 {
			cancel()
		}
	}
	results, err := app.NewPurgeExpired(store, policy, 10).Handle(ctx, time.Now())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if store.calls != 2 || len(results) != 1 || results[0].Deleted != 20 || results[0].Batches != 2 {
		t.Fatalf("calls = %d, results = %+v; want 2 batches of idempotency_record and nothing after", store.calls, results)
	}
}
