// Package app holds the use cases and the ports they need. A port is a
// small interface declared beside the use case that needs it, and
// implemented by an adapter at the edge: internal/repository for
// PostgreSQL, internal/provider for payment providers, internal/http for
// the stored responses, internal/consumer for the saga's replies.
//
// The use cases, each a type with a Handle method:
//
//   - ChargePayment: charge an order through a provider, once per key, per
//     external payment and per order (charge_payment.go).
//   - RefundPayment: refund part or all of a payment, once per key and per
//     external refund, never beyond the payment (refund_payment.go).
//   - ListRefunds: a payment's refunds (refund_payment.go).
//   - PaymentTransition: capture or void an authorized payment (a charge
//     with captureMethod manual), once per key, one winner per payment
//     (payment_transition.go, with the capture's and the void's own
//     parts).
//   - GetPayment: one of the client's payments (get_payment.go).
//   - GetOrder: an order as the projection holds it (orders.go).
//   - ApplyOrderEvents: project order events, each once (apply_order_events.go).
//   - ApplyProviderEvent: apply a provider's event (a webhook) once, as the
//     provider's answer to the command it reports (apply_provider_event.go).
//   - CompleteAbandonedCharges: drive the charges and refunds whose client
//     went away to their end (complete_abandoned_charges.go).
//   - ExpireLapsedAuthorizations: record EXPIRED the authorizations whose
//     hold the provider says lapsed (expire_authorizations.go).
//   - SettleReceivedModifications: look up the captures, voids and refunds
//     a provider received (a 202) and whose event has not come, and record
//     what it decided (received_modifications.go).
//   - PurgeExpired: delete what is past its retention (purge_expired.go).
//   - ReconcileBooks: compare the provider's books with ours over a window
//     (Reconcile, reconcile.go) and keep what disagrees as items, each
//     open until a later run judges it again and does not find it
//     (reconcile_books.go).
//
// And one that reaches the commands by another transport:
//
//   - SagaSteps: carry out the payment steps of order sagas, a charge or
//     its compensation, once per (sagaId, stepName), answered by replies
//     (saga_steps.go; its types and ports in saga.go). Its methods are the
//     commands it takes (Charge, Compensate, Invalid) and the completer's
//     (CompleteWaitingCompensations).
//
// ChargePayment, RefundPayment and the PaymentTransitions run on one core (idempotent_command.go):
// a read, then three atomic phases (claim, call, record), with the outcome
// model (outcome.go) between the call and the record; a capture, void or
// refund the provider received and decides later is recorded as such,
// its reservation kept until its event (received_modifications.go). A saga
// step runs on the same core under a key of its own. The core answers each
// command with the transport of the operation it came through (Transport):
// the HTTP API's response by default, the step's reply for the saga's
// operations (WithSagaReplies); no command knows either.
//
// The transaction boundary is visible in the use case: a phase that is
// one statement runs on the pool (Transactor.AutoCommit), a unit of
// several statements in Transactor.Transact, and no network call
// (provider, broker) ever happens inside a transaction.
package app
