package app_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// countingProvider approves every charge, counts the calls, and holds
// the charges of one external payment until hold is closed.
type countingProvider struct {
	calls    atomic.Int32
	held     domain.ExternalPaymentID
	hold     chan struct{}
	entering chan struct{}
}

func (*countingProvider) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: time.Second}
}

func (p *countingProvider) Charge(_ context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	p.calls.Add(1)
	if req.Charge.ExternalPaymentID == p.held {
		p.entering <- struct{}{}
		<-p.hold
	}
	return app.ProviderApproved, nil
}

func (p *countingProvider) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return app.ProviderApproved, nil
}

// sagaRoundTrips is the saga's charge steps on a real database whose
// round trips are logged.
type sagaRoundTrips struct {
	sagaOnCore
	provider *countingProvider
}

func newSagaRoundTrips(t *testing.T) *sagaRoundTrips {
	t.Helper()
	provider := &countingProvider{held: "pi_held", hold: make(chan struct{}), entering: make(chan struct{}, 1)}
	return &sagaRoundTrips{sagaOnCore: newSagaOnCore(t, 2001, provider, approvingProvider{}), provider: provider}
}

func (s *sagaRoundTrips) charge(t *testing.T, saga uuid.UUID, order int64, external string) app.SagaCharge {
	t.Helper()
	step, err := app.NewSagaStep(saga, "charge-payment")
	if err != nil {
		t.Fatal(err)
	}
	return app.SagaCharge{EventID: uuid.New(), Step: step, Charge: newTestCharge(t, order, external)}
}

// payments counts the payments of an order.
func (s *sagaRoundTrips) payments(t *testing.T, order int64) int {
	t.Helper()
	var n int
	if err := s.db.Raw(`SELECT count(*) FROM payment WHERE order_id = ?`, order).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// purgeStep deletes a step's saga_step row, as the retention job does
// once it is past the TTL, and leaves its key.
func (s *sagaRoundTrips) purgeStep(t *testing.T, step app.SagaStep) {
	t.Helper()
	if err := s.db.Exec(`DELETE FROM saga_step WHERE saga_id = ? AND step_name = ?`, step.SagaID, step.Name).Error; err != nil {
		t.Fatal(err)
	}
}

// A new charge step takes two round trips: its saga_step row inserted by
// phase 1's statement, and phase 3. Its key is not read before the claim:
// the statement claims only under a row it has just inserted, so the key
// is new. A re-sent step's claim commits nothing; the step then reads its
// row and its key, and is answered from the key.
func TestSagaChargeStepRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSagaRoundTrips(t)
	c := s.charge(t, uuid.New(), 2001, "pi_trips")

	s.log.take()
	res, err := s.steps.Charge(ctx, c, time.Now())
	if err != nil || res.Outcome != app.SagaReplied || res.Reply.Type != app.ReplyCharged || res.Replayed {
		t.Fatalf("the step: %+v %v", res, err)
	}
	trips := s.log.take()
	t.Logf("a new step: %d round trips %v", len(trips), trips)
	if len(trips) != 2 {
		t.Errorf("a new step took %d round trips %v, want 2: its saga_step row with phase 1, and phase 3", len(trips), trips)
	}
	for _, w := range trips {
		if w == "BEGIN" || w == "SELECT" {
			t.Errorf("a new step sent %s %v: no transaction and no read of its key, want none", w, trips)
		}
	}

	again, err := s.steps.Charge(ctx, resent(c), time.Now())
	if err != nil || !again.Replayed || again.Reply.EventID != res.Reply.EventID {
		t.Fatalf("the re-sent step: %+v %v, want the first reply (%s) replayed", again, err, res.Reply.EventID)
	}
	trips = s.log.take()
	t.Logf("a re-sent step: %d round trips %v", len(trips), trips)
	if len(trips) != 4 {
		t.Errorf("a re-sent step took %d round trips %v, want 4: the claim that commits nothing, its saga_step row, the key's read, the reply re-published", len(trips), trips)
	}
	if n := s.provider.calls.Load(); n != 1 {
		t.Errorf("the provider was called %d times, want 1", n)
	}
}

// resent is the step sent again by its orchestrator, with a new eventId.
func resent(c app.SagaCharge) app.SagaCharge {
	c.EventID = uuid.New()
	return c
}

// A step whose saga_step row the purge took while its key stayed (the row
// is written before the key, and both go by their own created_at) inserts
// its row anew: its key is not read before the claim, and the claim that
// does not claim answers as that read would have, moving no money.
func TestSagaChargeStepWhoseRowWasPurgedBeforeItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a completed key: its reply again", func(t *testing.T) {
		t.Parallel()
		s := newSagaRoundTrips(t)
		c := s.charge(t, uuid.New(), 2002, "pi_completed")
		first, err := s.steps.Charge(ctx, c, time.Now())
		if err != nil || first.Reply.Type != app.ReplyCharged {
			t.Fatalf("the step: %+v %v", first, err)
		}
		s.purgeStep(t, c.Step)

		again, err := s.steps.Charge(ctx, resent(c), time.Now())
		if err != nil || again.Outcome != app.SagaReplied || !again.Replayed || again.Reply.EventID != first.Reply.EventID ||
			again.Reply.Type != app.ReplyCharged || again.Reply.PaymentID != first.Reply.PaymentID {
			t.Fatalf("the step after its row was purged: %+v %v, want the first reply (%s) replayed", again, err, first.Reply.EventID)
		}
		if n := s.provider.calls.Load(); n != 1 {
			t.Errorf("the provider was called %d times, want 1", n)
		}
		if n := s.payments(t, 2002); n != 1 {
			t.Errorf("%d payments of the order, want 1", n)
		}
		var published int
		if err := s.db.Raw(`SELECT count(*) FROM outbox_event WHERE event_id = ? AND published_at IS NULL`, first.Reply.EventID).Scan(&published).Error; err != nil {
			t.Fatal(err)
		}
		if published != 1 {
			t.Errorf("the reply %s is in the outbox %d times to be published, want 1", first.Reply.EventID, published)
		}
	})

	t.Run("a tombstone's key: no money, the answer of a key reused", func(t *testing.T) {
		t.Parallel()
		s := newSagaRoundTrips(t)
		c := s.charge(t, uuid.New(), 2003, "pi_tombstone")
		comp, err := app.NewSagaStep(c.Step.SagaID, "compensate-payment")
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.steps.Compensate(ctx, app.SagaCompensation{EventID: uuid.New(), Step: comp, Compensates: c.Step.Name})
		if err != nil || res.Reply.Type != app.ReplyCompensated {
			t.Fatalf("the compensation before its step: %+v %v", res, err)
		}
		s.purgeStep(t, c.Step)

		// The key holds the tombstone's cancelled reply under another
		// hash: the read before the claim answered ErrKeyReused, and the
		// step was tried again; the claim that does not claim answers the
		// same.
		got, err := s.steps.Charge(ctx, c, time.Now())
		if !errors.Is(err, app.ErrSagaRetry) || !strings.Contains(err.Error(), app.ErrKeyReused.Error()) {
			t.Fatalf("the step after its tombstone was purged: %+v %v, want ErrSagaRetry for a key reused", got, err)
		}
		if n := s.provider.calls.Load(); n != 0 {
			t.Errorf("the provider was called %d times, want 0", n)
		}
		if n := s.payments(t, 2003); n != 0 {
			t.Errorf("%d payments of the order, want 0", n)
		}
	})

	t.Run("a live claim: pending, one call", func(t *testing.T) {
		t.Parallel()
		s := newSagaRoundTrips(t)
		c := s.charge(t, uuid.New(), 2004, "pi_held")
		var wg sync.WaitGroup
		var first app.SagaResult
		var firstErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, firstErr = s.steps.Charge(ctx, c, time.Now())
		}()
		<-s.provider.entering // the first attempt holds the claim, in its call
		s.purgeStep(t, c.Step)

		again, err := s.steps.Charge(ctx, resent(c), time.Now())
		close(s.provider.hold)
		wg.Wait()
		if firstErr != nil || first.Reply.Type != app.ReplyCharged {
			t.Fatalf("the first attempt: %+v %v", first, firstErr)
		}
		if err != nil || again.Outcome != app.SagaPending {
			t.Fatalf("the step while its key is claimed: %+v %v, want pending", again, err)
		}
		if n := s.provider.calls.Load(); n != 1 {
			t.Errorf("the provider was called %d times, want 1", n)
		}
		if n := s.payments(t, 2004); n != 1 {
			t.Errorf("%d payments of the order, want 1", n)
		}
	})
}
