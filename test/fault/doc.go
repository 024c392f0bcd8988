// Package fault is the fault suite: it runs the real payment-service binary
// as several replicas on one PostgreSQL and one Kafka broker, with the HTTP
// sandbox provider (or the stateful Stripe fake, internal/stripefake, with
// PAYMENT_PROVIDER=stripe) and loopback fault proxies between them, breaks things
// on purpose (kill -9, lost answers, database and broker outages, expired
// locks, provider faults) and checks after each fault that nothing was
// charged twice or lost: against the provider's ledger, the payment,
// idempotency_record and outbox_event tables, and the events on the topic.
//
// Its tests carry the build tag "fault", so `make test` (go test ./...)
// does not run them; `make test-fault` does, and docs/reliability.md says
// what each one checks and how long it takes.
package fault
