package repository_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

func orderEvent(t testing.TB, order int64, amount string, at time.Time) app.OrderCreated {
	t.Helper()
	money, err := domain.NewMoney(decimal.RequireFromString(amount), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	o, err := domain.NewOrder(domain.OrderID(order), 42, money)
	if err != nil {
		t.Fatal(err)
	}
	return app.OrderCreated{EventID: uuid.Must(uuid.NewV7()), OccurredAt: at, Order: o}
}

func projectedAmount(t *testing.T, db *gorm.DB, order int64) string {
	t.Helper()
	var amount string
	if err := db.Raw(`SELECT amount::text FROM order_projection WHERE order_id = ?`, order).Scan(&amount).Error; err != nil {
		t.Fatal(err)
	}
	return amount
}

func countRows(t *testing.T, db *gorm.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Raw(query, args...).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// ApplyOrderEvents against the real tables: duplicates (R-DIST-IDEM-2) and
// reordering, within one batch and across batches.
func TestApplyOrderEvents(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	type batch struct {
		events []int // indexes into the test's events
		want   app.ApplyResult
	}
	tests := []struct {
		name    string
		amounts []string    // one event per amount, all for order 1001
		at      []time.Time // occurredAt per event
		batches []batch
		want    string // amount in the projection afterwards
	}{
		{
			name: "same event five times in one batch", amounts: []string{"100.50"}, at: []time.Time{t0},
			batches: []batch{{[]int{0, 0, 0, 0, 0}, app.ApplyResult{Duplicates: 4, Written: 1}}},
			want:    "100.5000",
		},
		{
			name: "same event in five batches", amounts: []string{"100.50"}, at: []time.Time{t0},
			batches: []batch{
				{[]int{0}, app.ApplyResult{Written: 1}}, {[]int{0}, app.ApplyResult{Duplicates: 1}},
				{[]int{0}, app.ApplyResult{Duplicates: 1}}, {[]int{0}, app.ApplyResult{Duplicates: 1}},
				{[]int{0}, app.ApplyResult{Duplicates: 1}},
			},
			want: "100.5000",
		},
		{
			name: "older event in a later batch", amounts: []string{"1", "2"}, at: []time.Time{t0, t0.Add(time.Second)},
			batches: []batch{{[]int{1}, app.ApplyResult{Written: 1}}, {[]int{0}, app.ApplyResult{Superseded: 1}}},
			want:    "2.0000",
		},
		{
			name: "older event later in the same batch", amounts: []string{"1", "2"}, at: []time.Time{t0, t0.Add(time.Second)},
			batches: []batch{{[]int{1, 0}, app.ApplyResult{Superseded: 1, Written: 1}}},
			want:    "2.0000",
		},
		{
			name: "newer event in a later batch", amounts: []string{"1", "2"}, at: []time.Time{t0, t0.Add(time.Microsecond)},
			batches: []batch{{[]int{0}, app.ApplyResult{Written: 1}}, {[]int{1}, app.ApplyResult{Written: 1}}},
			want:    "2.0000",
		},
		{
			// UUID v7 ids of one process increase, so the later id wins a tie.
			name: "same instant: the greater event id wins", amounts: []string{"1", "2"}, at: []time.Time{t0, t0},
			batches: []batch{{[]int{1}, app.ApplyResult{Written: 1}}, {[]int{0}, app.ApplyResult{Superseded: 1}}},
			want:    "2.0000",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, tx := openDB(t)
			uc := app.NewApplyOrderEvents(tx, "order-projection")
			events := make([]app.OrderCreated, len(tc.amounts))
			for i := range events {
				events[i] = orderEvent(t, 1001, tc.amounts[i], tc.at[i])
			}
			for i, b := range tc.batches {
				var in []app.OrderCreated
				for _, idx := range b.events {
					in = append(in, events[idx])
				}
				got, err := uc.Handle(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if got != b.want {
					t.Errorf("batch %d: %+v, want %+v", i, got, b.want)
				}
			}
			if got := projectedAmount(t, db, 1001); got != tc.want {
				t.Errorf("projected amount %s, want %s", got, tc.want)
			}
			if n := countRows(t, db, `SELECT count(*) FROM processed_event WHERE consumer_name = 'order-projection'`); n != len(events) {
				t.Errorf("processed_event has %d rows, want %d", n, len(events))
			}
		})
	}
}

// A seeded row (no version) is replaced by the first event for its order.
func TestApplyOrderEventsSupersedesSeededRow(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 1, 'RUB')`).Error; err != nil {
		t.Fatal(err)
	}
	e := orderEvent(t, 1001, "100.50", time.Now().UTC().Truncate(time.Microsecond))
	e.SagaID = uuid.NullUUID{UUID: uuid.New(), Valid: true}
	got, err := app.NewApplyOrderEvents(tx, "order-projection").Handle(context.Background(), []app.OrderCreated{e})
	if err != nil || got.Written != 1 {
		t.Fatalf("Handle = %+v, %v", got, err)
	}
	// Visible to a client once it has a payment for the order.
	if err := db.Exec(`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		VALUES ('c', 1001, 42, 'sandbox', 'pi_1', 100.50, 'RUB', 'PENDING')`).Error; err != nil {
		t.Fatal(err)
	}
	p, err := app.NewGetOrder(tx).Handle(context.Background(), "c", 1001)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Order.Total.Amount().Equal(decimal.RequireFromString("100.50")) || p.SagaID != e.SagaID ||
		p.LastEvent == nil || *p.LastEvent != e.Version() {
		t.Fatalf("projection %+v, want the event's values %+v", p, e)
	}
}

// Concurrent consumers applying overlapping batches (a rebalance hands a
// partition over while the old owner is still applying it) apply each event
// once, and never deadlock: locks are taken in sorted order.
func TestApplyOrderEventsConcurrentOverlappingBatches(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	uc := app.NewApplyOrderEvents(tx, "order-projection")
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var events []app.OrderCreated
	for i := range 200 {
		events = append(events, orderEvent(t, int64(1+i%50), fmt.Sprint(1+i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	const workers = 8
	var mu sync.Mutex
	var total app.ApplyResult
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			// Each worker applies the events in a different rotation and
			// batch size, so batches overlap in every way.
			for start := 0; start < len(events); start += 20 + w {
				var in []app.OrderCreated
				for i := start; i < min(start+20+w, len(events)); i++ {
					in = append(in, events[(i+w*25)%len(events)])
				}
				res, err := uc.Handle(context.Background(), in)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				mu.Lock()
				total.Duplicates += res.Duplicates
				total.Superseded += res.Superseded
				total.Written += res.Written
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := total.Written + total.Superseded; got != len(events) {
		t.Errorf("written+superseded = %d, want %d (each event applied exactly once)", got, len(events))
	}
	if n := countRows(t, db, `SELECT count(*) FROM processed_event`); n != len(events) {
		t.Errorf("processed_event rows = %d, want %d", n, len(events))
	}
	// Order k's newest event is the last one, index 150+k-1: amount 150+k.
	for k := int64(1); k <= 50; k++ {
		if got, want := projectedAmount(t, db, k), fmt.Sprintf("%d.0000", 150+k); got != want {
			t.Errorf("order %d: amount %s, want %s", k, got, want)
		}
	}
}
