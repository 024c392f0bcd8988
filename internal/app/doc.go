// Package app holds the use cases (ChargePayment, GetPayment, GetOrder,
// ApplyOrderEvents, PurgeExpired, CompleteAbandonedCharges) and the ports
// they need. A port is a small interface declared here, by the code that
// uses it, and implemented by an adapter at the edge: internal/repository
// for PostgreSQL, internal/provider for payment providers, internal/http for
// rendering stored responses.
//
// The transaction boundary is visible in the use case: each
// Transactor.Transact call is one database transaction, each ChargeStore
// method one statement that is atomic on its own, and no network call
// (provider, broker) ever happens inside a transaction.
package app
