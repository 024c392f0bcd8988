package app

import "context"

// Transactor is the database the use cases run on: its repositories on the
// connection pool, where each statement commits on its own, or bound to
// one transaction. A phase that is one statement runs on the pool, in one
// round trip; a use case that needs several statements to commit together
// makes the boundary visible with Transact.
type Transactor interface {
	// AutoCommit returns the repositories on the pool, outside any
	// transaction.
	AutoCommit() Repos
	// Transact runs fn in one transaction: it commits when fn returns nil
	// and rolls back otherwise. The repositories handed to fn work inside
	// that transaction only. Errors are fn's, or the database's
	// (ErrStoreUnavailable when it cannot be reached).
	Transact(ctx context.Context, fn func(ctx context.Context, r Repos) error) error
}

// Repos are the repositories, each declared beside the use case that
// needs it.
type Repos struct {
	// Keys is the idempotency_record table (idempotent_command.go).
	Keys KeyStore
	// Charges is the payment table (charge_payment.go).
	Charges ChargeStore
	// Refunds is the refund table (refund_payment.go).
	Refunds RefundStore
	// Orders is the order projection (orders.go).
	Orders OrderStore
	// ProcessedEvents is processed_event (apply_order_events.go).
	ProcessedEvents ProcessedEvents
	// ProviderReports is what a provider's event is about
	// (apply_provider_event.go).
	ProviderReports ProviderReports
}
