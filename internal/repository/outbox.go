package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/telemetry"
)

// DefaultPaymentEventsTopic is where payment events go unless configured.
const DefaultPaymentEventsTopic = "payment.events"

// DefaultPaymentRepliesTopic is where saga steps' replies go unless
// configured.
const DefaultPaymentRepliesTopic = "payment.replies"

// OutboxConfig says where outbox rows are addressed, and whom to tell once
// they are committed.
type OutboxConfig struct {
	// PaymentEventsTopic is the Kafka topic of PaymentSucceeded.v1,
	// PaymentDeclined.v1 and PaymentFailed.v1.
	PaymentEventsTopic string
	// RepliesTopic is the Kafka topic of the saga steps' replies
	// (app.SagaReply).
	RepliesTopic string
	// Waker, if set, is woken after each commit that wrote outbox rows,
	// so that a relay publishes them now rather than at its next poll
	// (outbox.Waker).
	Waker OutboxWaker

	// wroteInTx is set inside Transactor.Transact: a store's write there
	// marks it, and the transaction wakes the Waker after its commit.
	// Woken before, a relay could read before the rows are visible and
	// then wait for its poll.
	wroteInTx *bool
}

// OutboxWaker is told that outbox rows were committed (outbox.Waker).
type OutboxWaker interface {
	// Wake asks for the relays to be woken soon; it must not block.
	Wake()
}

// wrote is called by a store once its outbox rows are written.
func (c OutboxConfig) wrote() {
	switch {
	case c.wroteInTx != nil:
		*c.wroteInTx = true
	case c.Waker != nil:
		c.Waker.Wake()
	}
}

// outboxEventRow is the row of outbox_event (db/migrations/00004_outbox.sql)
// a statement writes (the clause announced), published by internal/outbox.
type outboxEventRow struct {
	EventID    uuid.UUID
	Topic      string
	MessageKey string
	EventType  string
	Payload    string // json column: the exact bytes the relay publishes

	// TraceContext (json, NULL when not traced) is the recording span's W3C
	// trace context; the relay sends it as record headers.
	TraceContext *string
}

// addTo sets the parameters of the clause announced (an outbox row) in
// values.
func (ev outboxEventRow) addTo(values map[string]any) {
	values["event_id"] = ev.EventID
	values["topic"] = ev.Topic
	values["message_key"] = ev.MessageKey
	values["event_type"] = ev.EventType
	values["payload"] = ev.Payload
	values["trace_context"] = ptrString(ev.TraceContext)
}

// sagaIDField is an event's optional sagaId: omitted when the order came
// without one.
func sagaIDField(saga uuid.NullUUID) *string {
	if !saga.Valid {
		return nil
	}
	s := saga.UUID.String()
	return &s
}

// newOutboxRow renders an event's payload v as its outbox row: the payload
// is the exact message value the relay publishes, keyed by the order id
// (one order's events land on one partition, in order), with the trace
// context of the span writing it under ctx, if any.
func newOutboxRow(ctx context.Context, cfg OutboxConfig, id uuid.UUID, typ string, order int64, v any) (outboxEventRow, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return outboxEventRow{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	traceContext, err := traceContextJSON(ctx)
	if err != nil {
		return outboxEventRow{}, err
	}
	return outboxEventRow{
		EventID:      id,
		Topic:        cfg.PaymentEventsTopic,
		MessageKey:   strconv.FormatInt(order, 10),
		EventType:    typ,
		Payload:      string(payload),
		TraceContext: traceContext,
	}, nil
}

// traceContextJSON is the trace_context column's value for a row written
// under ctx: its span's W3C fields as a JSON object, nil when ctx is not
// traced (tracing off costs one context lookup here).
func traceContextJSON(ctx context.Context) (*string, error) {
	fields := telemetry.TraceContext(ctx)
	if fields == nil {
		return nil, nil
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode the trace context: %w", err)
	}
	s := string(b)
	return &s, nil
}

// ptrString is s's value, or "" for nil.
func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
