package app

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// Event types on the payment events topic. The suffix is the payload's
// version: a change that is not backward compatible gets a new type.
const (
	// EventPaymentSucceeded announces a payment the provider charged.
	EventPaymentSucceeded = "PaymentSucceeded.v1"
	// EventPaymentDeclined announces a payment the provider declined.
	EventPaymentDeclined = "PaymentDeclined.v1"
	// EventPaymentFailed announces a payment the provider refused for good
	// (nothing was charged).
	EventPaymentFailed = "PaymentFailed.v1"
)

// PaymentEvent announces a payment's outcome to other services. It is
// appended to the outbox in the transaction that records the outcome, and
// published by the relay after the commit (never inside the transaction).
type PaymentEvent struct {
	// ID is the eventId of R-DIST-IDEM-1: a UUID v7, generated once, when
	// the event is written. Every publication of the event (the relay may
	// publish a row twice after a crash) carries this same id, so consumers
	// dedup on it (R-DIST-IDEM-2).
	ID uuid.UUID
	// Type is EventPaymentSucceeded, EventPaymentDeclined or
	// EventPaymentFailed.
	Type string
	// SagaID is the order's saga as the order projection knows it; not
	// Valid when the order event carried none.
	SagaID uuid.NullUUID
	// Payment is the payment with its final status.
	Payment domain.Payment
	// OccurredAt is when the outcome was recorded, in UTC.
	OccurredAt time.Time
}

// NewPaymentEvent builds the event for a payment that has just reached its
// final status.
func NewPaymentEvent(p domain.Payment, saga uuid.NullUUID, occurredAt time.Time) (PaymentEvent, error) {
	var typ string
	switch p.Status {
	case domain.PaymentSucceeded:
		typ = EventPaymentSucceeded
	case domain.PaymentDeclined:
		typ = EventPaymentDeclined
	case domain.PaymentFailed:
		typ = EventPaymentFailed
	default:
		return PaymentEvent{}, fmt.Errorf("payment %d is %s: only a final status is an event", p.ID, p.Status)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return PaymentEvent{}, fmt.Errorf("event id: %w", err)
	}
	return PaymentEvent{ID: id, Type: typ, SagaID: saga, Payment: p, OccurredAt: occurredAt.UTC()}, nil
}

// Outbox is the transactional outbox: events written here commit or roll
// back with the business change of the same transaction. A relay publishes
// them afterwards.
type Outbox interface {
	// AppendPaymentEvent stores e for publication.
	AppendPaymentEvent(ctx context.Context, e PaymentEvent) error
}
