package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/consumer"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/repository"
)

// The saga's steps are a transport of the core's beside the HTTP API: the
// operation a command came through picks the encoding of its key's
// answer, whoever records it (the command itself, the provider's event,
// the completer), never the key's look.

// losingProvider loses the answer of every call while lose is set (the
// call and the lookup both unknown), and approves every call otherwise.
type losingProvider struct{ lose atomic.Bool }

func (*losingProvider) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: time.Second}
}

func (p *losingProvider) answer() (app.ProviderDecision, error) {
	if p.lose.Load() {
		return "", app.ErrProviderOutcomeUnknown
	}
	return app.ProviderApproved, nil
}

func (p *losingProvider) Charge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return p.answer()
}
func (p *losingProvider) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return p.answer()
}
func (p *losingProvider) Refund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return p.answer()
}
func (p *losingProvider) LookupRefund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return p.answer()
}

// sagaOnCore is the saga's steps and the commands they run, on one core
// over a real database whose round trips are logged, with the HTTP API's
// transport and the saga's, and ten orders from firstOrder projected.
type sagaOnCore struct {
	db      *gorm.DB
	log     *statementLog
	charges *app.ChargePayment
	refunds *app.RefundPayment
	steps   *app.SagaSteps
}

func newSagaOnCore(t *testing.T, firstOrder int64, charger app.ChargeProvider, refunder app.RefundProvider) sagaOnCore {
	t.Helper()
	db, log, logger := openLogged(t, 4)
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency)
SELECT g, 42, 100, 'RUB' FROM generate_series(?::bigint, ?::bigint + 9) AS g`, firstOrder, firstOrder).Error; err != nil {
		t.Fatal(err)
	}
	core := app.NewCore(repository.NewTransactor(db), httpapi.ResponseEncoder{}, 30*time.Second, logger,
		app.WithSagaReplies(consumer.SagaReplies{}))
	charges := app.NewChargePayment(core, map[domain.ProviderName]app.ChargeProvider{"sandbox": charger})
	refunds := app.NewRefundPayment(core, refunder)
	return sagaOnCore{db: db, log: log, charges: charges, refunds: refunds,
		steps: app.NewSagaSteps(charges, refunds, nil, consumer.SagaReplies{}, "saga", time.Second, "saga-commands", logger)}
}

// transportRig is sagaOnCore with a provider that loses answers.
type transportRig struct {
	sagaOnCore
	provider *losingProvider
}

func newSagaTransport(t *testing.T) *transportRig {
	t.Helper()
	provider := &losingProvider{}
	return &transportRig{sagaOnCore: newSagaOnCore(t, 3001, provider, provider), provider: provider}
}

func newTestCharge(t *testing.T, order int64, external string) domain.Charge {
	t.Helper()
	money, err := domain.NewMoney(decimal.RequireFromString("100"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(domain.OrderID(order), 42, money, "sandbox", domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// answered is the answer stored for scope.
func (s *transportRig) answered(t *testing.T, scope app.IdempotencyScope) app.IdempotencyRecord {
	t.Helper()
	rec, found, err := repository.NewTransactor(s.db).AutoCommit().Keys.Lookup(context.Background(), scope)
	if err != nil || !found || rec.Status != app.RecordCompleted {
		t.Fatalf("the key %q: %+v %v %v, want it completed", scope.Key, rec, found, err)
	}
	return rec
}

// replied checks that scope's stored answer is the reply want to step, and
// that the reply is in the outbox to be published.
func (s *transportRig) replied(t *testing.T, scope app.IdempotencyScope, step app.SagaStep, want app.SagaReplyType) app.SagaReply {
	t.Helper()
	reply, _, err := consumer.SagaReplies{}.DecodeSagaReply(s.answered(t, scope).Response)
	if err != nil {
		t.Fatalf("the key %q's answer is no reply: %v", scope.Key, err)
	}
	if reply.Type != want || reply.Step != step {
		t.Fatalf("the key %q's reply: %+v, want %s to %+v", scope.Key, reply, want, step)
	}
	var n int
	if err := s.db.Raw(`SELECT count(*) FROM outbox_event WHERE event_id = ?`, reply.EventID).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the reply %s is in the outbox %d times, want once", reply.EventID, n)
	}
	return reply
}

// The answer is the transport's of the operation the command came
// through: a command that came through the HTTP API is answered with its
// response even under a key that reads like a step's, and a step's charge
// with its reply.
func TestTheOperationsTransportAnswersACommand(t *testing.T) {
	t.Parallel()
	s := newSagaTransport(t)
	step, err := app.NewSagaStep(uuid.New(), "charge-payment")
	if err != nil {
		t.Fatal(err)
	}
	otherStep, err := app.NewSagaStep(uuid.New(), "charge-payment")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name      string
		scope     app.IdempotencyScope
		operation string
		reply     bool
	}{
		{"an HTTP charge", app.IdempotencyScope{ClientID: "c", Key: "k-http"}, app.OperationChargePayment, false},
		{"an HTTP charge under a key that reads like a step's", app.SagaStepScope("saga", otherStep), app.OperationChargePayment, false},
		{"a step's charge", app.SagaStepScope("saga", step), app.OperationSagaCharge, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := app.ChargeCommand{Scope: tc.scope, Charge: newTestCharge(t, 3001+int64(i), "pi_transport_"+tc.name), Operation: tc.operation}
			res, err := s.charges.Handle(context.Background(), cmd)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reply {
				if res.Response.Publish == nil {
					t.Fatalf("a step's answer with no message to publish: %s", res.Response.Body)
				}
				s.replied(t, tc.scope, step, app.ReplyCharged)
				return
			}
			var body struct{ Status string }
			if res.Response.Publish != nil || res.Response.StatusCode != 201 || json.Unmarshal(res.Response.Body, &body) != nil || body.Status != "SUCCEEDED" {
				t.Fatalf("an HTTP command's answer: %d %s (publish %+v), want 201 and the payment", res.Response.StatusCode, res.Response.Body, res.Response.Publish)
			}
		})
	}
}

// A step whose provider answer was lost is replied once its outcome is
// known, by whoever records it: the provider's event, or the completer's
// retry. Neither knows the step: the record's command hash names the
// saga's operation.
func TestALostStepIsRepliedByWhoeverSettlesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)

	charge := func(t *testing.T, s *transportRig, order int64) app.SagaCharge {
		t.Helper()
		step, err := app.NewSagaStep(uuid.New(), "charge-payment")
		if err != nil {
			t.Fatal(err)
		}
		c := app.SagaCharge{EventID: uuid.New(), Step: step, Charge: newTestCharge(t, order, "pi_lost_"+step.SagaID.String())}
		s.provider.lose.Store(true)
		res, err := s.steps.Charge(ctx, c, time.Now())
		if err != nil || res.Outcome != app.SagaPending {
			t.Fatalf("the step whose answer was lost: %+v %v, want pending", res, err)
		}
		s.provider.lose.Store(false)
		return c
	}

	t.Run("the provider's event", func(t *testing.T) {
		t.Parallel()
		s := newSagaTransport(t)
		c := charge(t, s, 3001)
		events := app.NewApplyProviderEvent(s.charges, s.refunds, "webhook:test", logger)
		got, err := events.Handle(ctx, app.ProviderEvent{ID: "evt_" + c.Step.SagaID.String(), Provider: "sandbox", Object: app.ObjectCharge,
			Decision: app.ProviderApproved, ProviderKey: c.Charge.ProviderIdempotencyKey(), Amount: decimal.RequireFromString("100"), Currency: "RUB"})
		if err != nil || got != app.EventApplied {
			t.Fatalf("the provider's event: %s %v, want applied", got, err)
		}
		reply := s.replied(t, app.SagaStepScope("saga", c.Step), c.Step, app.ReplyCharged)

		again, err := s.steps.Charge(ctx, resent(c), time.Now())
		if err != nil || !again.Replayed || again.Reply.EventID != reply.EventID {
			t.Fatalf("the step re-sent: %+v %v, want the event's reply %s", again, err, reply.EventID)
		}
	})

	t.Run("the completer", func(t *testing.T) {
		t.Parallel()
		s := newSagaTransport(t)
		c := charge(t, s, 3002)
		// A lost answer ends its claim's lock at once: no grace, the
		// completer takes it over now.
		completer := app.NewCompleteAbandonedCharges(repository.NewRetention(s.db),
			map[app.CommandName]app.Resumable{app.CommandCharge: s.charges, app.CommandRefund: s.refunds}, 0, 10, logger)
		if res, err := completer.Handle(ctx); err != nil || res.Completed != 1 {
			t.Fatalf("the completer: %+v %v, want the step completed", res, err)
		}
		s.replied(t, app.SagaStepScope("saga", c.Step), c.Step, app.ReplyCharged)

		// Its compensation's refund, lost too, is the refund's command
		// under the compensation's key: the completer replies it as well.
		comp, err := app.NewSagaStep(c.Step.SagaID, "refund-payment")
		if err != nil {
			t.Fatal(err)
		}
		s.provider.lose.Store(true)
		res, err := s.steps.Compensate(ctx, app.SagaCompensation{EventID: uuid.New(), Step: comp, Compensates: c.Step.Name})
		if err != nil || res.Outcome != app.SagaPending {
			t.Fatalf("the compensation whose refund's answer was lost: %+v %v, want pending", res, err)
		}
		s.provider.lose.Store(false)
		if res, err := completer.Handle(ctx); err != nil || res.Completed != 1 {
			t.Fatalf("the completer: %+v %v, want the compensation's refund completed", res, err)
		}
		compensated := s.replied(t, app.SagaCompensationScope("saga", comp, c.Step.Name), comp, app.ReplyCompensated)
		if !compensated.Amount.Equal(decimal.RequireFromString("100")) || compensated.Compensates != c.Step.Name {
			t.Fatalf("the compensation's reply: %+v, want 100 given back for %s", compensated, c.Step.Name)
		}
	})
}
