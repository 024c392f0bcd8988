package app

import (
	"context"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// CommandCapture names a capture's idempotency records.
const CommandCapture CommandName = "capture"

// OperationCapturePayment is the Operation of a capture made through POST
// /payments/{id}/captures.
const OperationCapturePayment = "POST /payments/{id}/captures"

// Capture events, by the capture's final status.
const (
	// EventPaymentCaptured announces a payment whose held money was taken.
	EventPaymentCaptured = "PaymentCaptured.v1"
	// EventCaptureDeclined announces a capture the provider declined.
	EventCaptureDeclined = "CaptureDeclined.v1"
	// EventCaptureFailed announces a capture the provider refused for good.
	EventCaptureFailed = "CaptureFailed.v1"
)

// NewCapturePayment is the capture of authorized payments: a transition
// on the core (payment_transition.go) that asks the provider to take what
// it holds, and makes the payment SUCCEEDED with its captured amount. One
// capture per authorization; a partial capture releases the rest.
func NewCapturePayment(core *Core, provider CaptureProvider) *PaymentTransition {
	return NewPaymentTransition(core, CommandCapture, domain.TransitionCapture, OperationCapturePayment, domain.PaymentSucceeded,
		captureCall{provider}, TransitionEvents{
			domain.PaymentSucceeded: EventPaymentCaptured,
			domain.PaymentDeclined:  EventCaptureDeclined,
			domain.PaymentFailed:    EventCaptureFailed,
		})
}

// captureCall asks the provider for a capture.
type captureCall struct{ provider CaptureProvider }

func (c captureCall) Call(ctx context.Context, p domain.Payment, t domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.Capture(ctx, providerCapture(p, t, key))
}

// providerCapture is capture t of payment p as the provider is asked for
// it, under key.
func providerCapture(p domain.Payment, t domain.Transition, key string) ProviderCapture {
	return ProviderCapture{IdempotencyKey: key, AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt,
		Amount: t.Amount, Reference: t.Reference}
}

func (c captureCall) Abilities() ProviderAbilities { return c.provider.Abilities() }

func (c captureCall) Lookup(ctx context.Context, p domain.Payment, t domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.LookupCapture(ctx, providerCapture(p, t, key))
}

// ProviderCapture is a capture as the provider is asked for it: take
// Amount of the money held by an authorization.
type ProviderCapture struct {
	// IdempotencyKey is the capture's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under: how the provider knows the hold.
	AuthorizationKey string
	// AuthorizationReservedAt is when the authorized payment was reserved:
	// no request for it left before, so a provider that lists its records
	// over a window of time finds the hold from there.
	AuthorizationReservedAt time.Time
	// Amount is what to take, at most what is held, in its currency.
	Amount domain.Money
	// Reference is the client's id of the capture at the provider.
	Reference string
}

// CaptureProvider takes money an authorization holds. Its answers are a
// decision or one of the errors of outcome.go; a capture the provider can
// never make (the hold lapsed, was voided or captured already, an amount
// above it) is refused for good (ErrProviderRefused).
type CaptureProvider interface {
	Provider
	// Capture asks the provider to capture req under req.IdempotencyKey.
	Capture(ctx context.Context, req ProviderCapture) (ProviderDecision, error)
	// LookupCapture asks, without capturing, what the provider holds of
	// req (ErrNoProviderCharge: nothing found; any other error: it cannot
	// be known now).
	LookupCapture(ctx context.Context, req ProviderCapture) (ProviderDecision, error)
}
