package repository

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
)

// The gate admits in arrival order: with its one slot taken, waiters
// enter one after the other as they came. Each waiter says it is about to
// wait, and the next one comes a little later, so that the arrival order
// is the order of the loop (the only timing in the test: the few
// instructions between the signal and the wait).
func TestGateAdmitsInArrivalOrder(t *testing.T) {
	t.Parallel()
	g := NewGate(1)
	ctx := context.Background()
	if err := g.enter(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 10
	order := make(chan int, n)
	for i := range n {
		arriving := make(chan struct{})
		go func() {
			close(arriving)
			if err := g.enter(ctx); err != nil {
				t.Error(err)
				return
			}
			order <- i
			g.leave()
		}()
		<-arriving
		time.Sleep(20 * time.Millisecond)
	}
	g.leave()
	for want := range n {
		if got := <-order; got != want {
			t.Fatalf("waiter %d entered in place %d", got, want)
		}
	}
}

func TestGateGivesUpWithTheContext(t *testing.T) {
	t.Parallel()
	g := NewGate(1)
	if err := g.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.enter(ctx); !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("enter with a full gate and an ending context = %v, want ErrStoreUnavailable", err)
	}
	var nilGate *Gate
	if err := nilGate.enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	nilGate.leave()
}
