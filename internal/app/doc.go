// Package app holds the use cases and the ports they need. A port is a
// small interface declared beside the use case that needs it, and
// implemented by an adapter at the edge: internal/repository for
// PostgreSQL, internal/provider for payment providers, internal/http for
// the stored responses.
//
// The use cases, each a type with a Handle method:
//
//   - ChargePayment: charge an order through a provider, once per key, per
//     external payment and per order (charge_payment.go).
//   - RefundPayment: refund part or all of a payment, once per key and per
//     external refund, never beyond the payment (refund_payment.go).
//   - ListRefunds: a payment's refunds (refund_payment.go).
//   - GetPayment: one of the client's payments (get_payment.go).
//   - GetOrder: an order as the projection holds it (orders.go).
//   - ApplyOrderEvents: project order events, each once (apply_order_events.go).
//   - ApplyProviderEvent: apply a provider's event (a webhook) once, as the
//     provider's answer to the command it reports (apply_provider_event.go).
//   - CompleteAbandonedCharges: drive the charges and refunds whose client
//     went away to their end (complete_abandoned_charges.go).
//   - PurgeExpired: delete what is past its retention (purge_expired.go).
//
// ChargePayment and RefundPayment run on one core (idempotent_command.go):
// a read, then three atomic phases (claim, call, record), with the outcome
// model (outcome.go) between the call and the record.
//
// The transaction boundary is visible in the use case: a phase that is
// one statement runs on the pool (Transactor.AutoCommit), a unit of
// several statements in Transactor.Transact, and no network call
// (provider, broker) ever happens inside a transaction.
package app
