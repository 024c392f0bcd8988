package app

import (
	"context"
)

// ProviderVoid is a void as the provider is asked for it: release what an
// authorization holds.
type ProviderVoid struct {
	// IdempotencyKey is the void's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under.
	AuthorizationKey string
}

// VoidProvider releases the money an authorization holds. A void the
// provider can never make (the hold was captured, or lapsed) is refused
// for good (ErrProviderRefused).
type VoidProvider interface {
	// Void asks the provider to void req under req.IdempotencyKey.
	Void(ctx context.Context, req ProviderVoid) (ProviderDecision, error)
	// LookupVoid asks, without voiding, what the provider holds under an
	// idempotency key.
	LookupVoid(ctx context.Context, idempotencyKey string) (ProviderDecision, error)
}
