package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/outbox"
)

// deafStore's sessions never hear a commit's notification: their Wait
// lasts until its context ends, so only the poll, or Flush, makes the
// relay read again.
type deafStore struct{ outbox.Store }

func (s deafStore) Lead(ctx context.Context) (outbox.Session, error) {
	sess, err := s.Store.Lead(ctx)
	if err != nil {
		return nil, err
	}
	return deafSession{sess}, nil
}

type deafSession struct{ outbox.Session }

func (deafSession) Wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Flush is what the service's shutdown gives the relay its own time for:
// when it returns nil, every row committed before the call is published,
// even with the relay asleep (no notification heard, the next poll ten
// minutes away). A relay that does not lead has nothing to flush: the
// leader publishes.
func TestFlushPublishesWhatCommittedBeforeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.relayConfig()
	cfg.Store = deafStore{cfg.Store}
	cfg.PollInterval = 10 * time.Minute
	reg := prometheus.NewRegistry()
	cfg.Metrics = outbox.NewMetrics(reg, e.topic)
	relay, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := relay.Flush(ctx); err != nil {
		t.Fatalf("Flush before Run = %v, want nil: a relay that does not lead has nothing to flush", err)
	}

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	waitFor(t, "the relay to lead", func() bool { return value(t, reg, "outbox_relay_leader") == 1 })

	for round := 1; round <= 3; round++ {
		e.writeEvents(t, 5, 1, 1) // committed; the relay hears nothing
		if err := relay.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NULL`); got != 0 {
			t.Fatalf("round %d: %d rows unpublished after Flush returned", round, got)
		}
	}
	recs := kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second)
	asyncapitest.ValidateRecords(t, "payment.events", recs)
	if got := len(recs); got != 15 {
		t.Fatalf("records on the topic = %d, want 15", got)
	}
}
