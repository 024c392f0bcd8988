package app

import (
	"context"

	"github.com/example/payment-service/internal/domain"
)

// ProviderCapture is a capture as the provider is asked for it: take
// Amount of the money held by an authorization.
type ProviderCapture struct {
	// IdempotencyKey is the capture's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under: how the provider knows the hold.
	AuthorizationKey string
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
	// Capture asks the provider to capture req under req.IdempotencyKey.
	Capture(ctx context.Context, req ProviderCapture) (ProviderDecision, error)
	// LookupCapture asks, without capturing, what the provider holds under
	// an idempotency key (ErrNoProviderCharge: nothing, and nothing being
	// made; any other error: it cannot be known now).
	LookupCapture(ctx context.Context, idempotencyKey string) (ProviderDecision, error)
}
