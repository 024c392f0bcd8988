// Package demoorders holds the orders the tour (docs/tour.md) charges (1001,
// 1002, 1003) and the OrderCreated.v1 events that announce orders, for the
// two stacks a newcomer runs: `make dev` (cmd/payment-dev) writes the
// orders straight into its throwaway database; docker compose runs
// `payment-demo -seed-orders` once, which publishes them as events for the
// service's consumer to project, as the order service would. The demo
// (cmd/payment-demo) publishes its own orders with the same event.
package demoorders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
)

// Order is an order as OrderCreated.v1 announces it.
type Order struct {
	ID         int64
	CustomerID int64
	Amount     string // a decimal string, as the projection stores it
	Currency   string
}

// Tour are the orders the tour (docs/tour.md) charges.
var Tour = []Order{
	{1001, 42, "100.50", "RUB"},
	{1002, 42, "2500.00", "RUB"},
	{1003, 7, "19.99", "EUR"},
}

// tourNamespace makes the tour events' ids: the same on every run, so the
// consumer's processed_event drops a second seeding as a duplicate.
var tourNamespace = uuid.MustParse("5f0c8f1e-6a43-4d55-9c1e-3f2b2f6d1001")

// tourOccurredAt is the tour events' occurredAt: fixed, like their ids, so
// a second seeding is the same event, not a newer version of the order.
var tourOccurredAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TourEvent is order o's OrderCreated.v1 with its fixed eventId, sagaId and
// occurredAt.
func TourEvent(o Order) Event {
	id := strconv.FormatInt(o.ID, 10)
	return Event{
		EventID:    uuid.NewSHA1(tourNamespace, []byte("event "+id)),
		SagaID:     uuid.NewSHA1(tourNamespace, []byte("saga "+id)),
		Order:      o,
		OccurredAt: tourOccurredAt,
	}
}

// Event is one OrderCreated.v1.
type Event struct {
	EventID, SagaID uuid.UUID
	Order           Order
	OccurredAt      time.Time
}

// Message is the event's Kafka record: keyed by the order id, the value the
// JSON the consumer reads (the amount a JSON number, as the order service
// writes it).
func (e Event) Message() (kafka.Message, error) {
	value, err := json.Marshal(map[string]any{
		"eventId": e.EventID.String(), "sagaId": e.SagaID.String(), "eventType": "OrderCreated.v1",
		"orderId": e.Order.ID, "customerId": e.Order.CustomerID, "amount": json.Number(e.Order.Amount),
		"currency": e.Order.Currency, "occurredAt": e.OccurredAt.UTC().Format(time.RFC3339),
	})
	if err != nil {
		return kafka.Message{}, err
	}
	return kafka.Message{Key: []byte(strconv.FormatInt(e.Order.ID, 10)), Value: value}, nil
}

// Publish writes the events to topic, acknowledged by every in-sync
// replica, once the topic exists: it waits for it (compose creates the
// topics in a service of its own) until ctx ends.
func Publish(ctx context.Context, brokers []string, topic string, events ...Event) (err error) {
	if err := waitForTopic(ctx, brokers, topic); err != nil {
		return err
	}
	msgs := make([]kafka.Message, len(events))
	for i, e := range events {
		m, err := e.Message()
		if err != nil {
			return err
		}
		msgs[i] = m
	}
	// A transport of its own reads the topic's metadata afresh: kafka-go's
	// default one is the process's, and caches what it read before the
	// topic existed (waitForTopic waits for the broker, not that cache).
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, Balancer: &kafka.Hash{}, Transport: transport}
	defer func() { err = errors.Join(err, w.Close()) }()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("publish to %s at %v: %w", topic, brokers, err)
	}
	return nil
}

// topicPollInterval is the pause between looks for a topic that is not
// there yet.
const topicPollInterval = 500 * time.Millisecond

// waitForTopic returns once the broker knows topic with a leader for every
// partition, or ctx's error with the last reason it was not ready.
func waitForTopic(ctx context.Context, brokers []string, topic string) error {
	for {
		err := topicReady(ctx, brokers, topic)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s at %v never became ready: %w", topic, brokers, errors.Join(ctx.Err(), err))
		case <-time.After(topicPollInterval):
		}
	}
}

func topicReady(ctx context.Context, brokers []string, topic string) error {
	conn, err := kafka.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return err
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return fmt.Errorf("topic %s has no partitions yet", topic)
	}
	for _, p := range parts {
		if p.Leader.ID < 0 || p.Leader.Host == "" {
			return fmt.Errorf("partition %d of %s has no leader yet", p.ID, topic)
		}
	}
	return nil
}
