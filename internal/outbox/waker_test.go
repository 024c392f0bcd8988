package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/example/payment-service/internal/outbox"
)

// Wakes asked for while a notification is on its way join into one more:
// a burst of commits costs the database two notifications, not one each.
func TestWakerSendsOneNotificationPerBurst(t *testing.T) {
	t.Parallel()
	sent := make(chan struct{})
	release := make(chan struct{})
	w := outbox.NewWaker(func(ctx context.Context) error {
		sent <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	w.Wake()
	<-sent // the first notification is under way, and waits
	for range 100 {
		w.Wake()
	}
	release <- struct{}{}
	select {
	case <-sent: // the burst's one notification
	case <-time.After(10 * time.Second):
		t.Fatal("the wakes asked for during a notification were lost")
	}
	release <- struct{}{}
	select {
	case <-sent:
		t.Fatal("a third notification for one burst of wakes")
	case <-time.After(10 * outbox.WakeGap):
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after its context ended, want nil", err)
	}
	var none *outbox.Waker
	none.Wake() // a store without a waker: nothing happens
}
