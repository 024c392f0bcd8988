// Package app holds the use cases (ChargePayment, GetPayment) and the ports
// they need. A port is a small interface declared here, by the code that
// uses it, and implemented by an adapter at the edge: internal/repository
// for PostgreSQL, internal/provider for payment providers, internal/http for
// rendering stored responses.
//
// The transaction boundary is visible in the use case: each
// Transactor.Transact call is one database transaction, and no network call
// (provider, broker) ever happens inside one.
package app
