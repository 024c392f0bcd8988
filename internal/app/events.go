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
	// EventPaymentRefunded announces a refund the provider made.
	EventPaymentRefunded = "PaymentRefunded.v1"
	// EventRefundDeclined announces a refund the provider declined.
	EventRefundDeclined = "RefundDeclined.v1"
	// EventRefundFailed announces a refund the provider refused for good
	// (nothing was refunded).
	EventRefundFailed = "RefundFailed.v1"
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

// RefundEvent announces a refund's outcome, through the outbox like a
// PaymentEvent, keyed by the refunded payment's order.
type RefundEvent struct {
	// ID is the eventId (R-DIST-IDEM-1), a UUID v7.
	ID uuid.UUID
	// Type is EventPaymentRefunded, EventRefundDeclined or EventRefundFailed.
	Type string
	// SagaID is the order's saga; not Valid when unknown.
	SagaID uuid.NullUUID
	// OrderID is the refunded payment's order: the message key.
	OrderID domain.OrderID
	// Refund is the refund with its final status.
	Refund domain.Refund
	// OccurredAt is when the outcome was recorded, in UTC.
	OccurredAt time.Time
}

// refundEventTypes name the event of each final refund status.
var refundEventTypes = map[domain.RefundStatus]string{
	domain.RefundSucceeded: EventPaymentRefunded,
	domain.RefundDeclined:  EventRefundDeclined,
	domain.RefundFailed:    EventRefundFailed,
}

// NewRefundEvent builds the event for a refund that has just reached its
// final status.
func NewRefundEvent(r domain.Refund, order domain.OrderID, saga uuid.NullUUID, occurredAt time.Time) (RefundEvent, error) {
	typ, ok := refundEventTypes[r.Status]
	if !ok {
		return RefundEvent{}, fmt.Errorf("refund %d is %s: only a final status is an event", r.ID, r.Status)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return RefundEvent{}, fmt.Errorf("event id: %w", err)
	}
	return RefundEvent{ID: id, Type: typ, SagaID: saga, OrderID: order, Refund: r, OccurredAt: occurredAt.UTC()}, nil
}
