package app

import (
	"context"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// CommandVoid names a void's idempotency records.
const CommandVoid CommandName = "void"

// OperationVoidPayment is the Operation of a void made through POST
// /payments/{id}/voids.
const OperationVoidPayment = "POST /payments/{id}/voids"

// Void events, by the void's final status.
const (
	// EventPaymentVoided announces a payment whose hold was released.
	EventPaymentVoided = "PaymentVoided.v1"
	// EventVoidDeclined announces a void the provider declined.
	EventVoidDeclined = "VoidDeclined.v1"
	// EventVoidFailed announces a void the provider refused for good.
	EventVoidFailed = "VoidFailed.v1"
)

// NewVoidPayment is the void of authorized payments: a transition on the
// core (payment_transition.go) that asks the provider to release the hold,
// and makes the payment VOIDED, its order free for a new payment.
func NewVoidPayment(core *Core, provider VoidProvider) *PaymentTransition {
	return NewPaymentTransition(core, CommandVoid, domain.TransitionVoid, OperationVoidPayment, domain.PaymentVoided,
		voidCall{provider}, TransitionEvents{
			domain.PaymentSucceeded: EventPaymentVoided,
			domain.PaymentDeclined:  EventVoidDeclined,
			domain.PaymentFailed:    EventVoidFailed,
		})
}

// voidCall asks the provider for a void.
type voidCall struct{ provider VoidProvider }

func (c voidCall) Call(ctx context.Context, p domain.Payment, _ domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.Void(ctx, providerVoid(p, key))
}

// providerVoid is the void of payment p as the provider is asked for it,
// under key.
func providerVoid(p domain.Payment, key string) ProviderVoid {
	return ProviderVoid{IdempotencyKey: key, AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt}
}

func (c voidCall) Abilities() ProviderAbilities { return c.provider.Abilities() }

func (c voidCall) Lookup(ctx context.Context, p domain.Payment, _ domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.LookupVoid(ctx, providerVoid(p, key))
}

// ProviderVoid is a void as the provider is asked for it: release what an
// authorization holds.
type ProviderVoid struct {
	// IdempotencyKey is the void's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under.
	AuthorizationKey string
	// AuthorizationReservedAt is as ProviderCapture's.
	AuthorizationReservedAt time.Time
}

// VoidProvider releases the money an authorization holds. A void the
// provider can never make (the hold was captured, or lapsed) is refused
// for good (ErrProviderRefused).
type VoidProvider interface {
	Provider
	// Void asks the provider to void req under req.IdempotencyKey.
	Void(ctx context.Context, req ProviderVoid) (ProviderDecision, error)
	// LookupVoid asks, without voiding, what the provider holds of req.
	LookupVoid(ctx context.Context, req ProviderVoid) (ProviderDecision, error)
}
