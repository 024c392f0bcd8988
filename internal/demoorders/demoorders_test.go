package demoorders_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/demoorders"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Seeding twice publishes the same events: same eventIds, same bytes.
func TestTourEventsAreTheSameOnEveryRun(t *testing.T) {
	t.Parallel()
	ids := map[uuid.UUID]bool{}
	for _, o := range demoorders.Tour {
		first, err := demoorders.TourEvent(o).Message()
		if err != nil {
			t.Fatal(err)
		}
		again, err := demoorders.TourEvent(o).Message()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first.Value, again.Value) || !bytes.Equal(first.Key, again.Key) {
			t.Fatalf("order %d: %s, then %s", o.ID, first.Value, again.Value)
		}
		id := demoorders.TourEvent(o).EventID
		if ids[id] {
			t.Fatalf("order %d: eventId %s is another order's", o.ID, id)
		}
		ids[id] = true
	}
}

// What compose's seed-orders does, against the real service and its
// consumer: the tour's orders, published twice, are projected once each
// (the second seeding is dropped by processed_event), and the tour's first
// charge of order 1001 then succeeds instead of 422 order-not-found.
func TestSeedingTwiceProjectsTheTourOrdersOnce(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	// One partition: the marker published last is projected after both
	// seedings were read.
	orders := kafkatest.CreateTopic(t, brokers, 1)
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s" // a real broker's default minimum
	}
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"ORDER_EVENTS_TOPIC":                orders,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_EVENTS_TOPIC":              kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_CONSUMER_GROUP":              "order-projection-" + uuid.NewString(),
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Two runs of the seeder, each making its events afresh.
	for range 2 {
		var tour []demoorders.Event
		for _, o := range demoorders.Tour {
			tour = append(tour, demoorders.TourEvent(o))
		}
		if err := demoorders.Publish(ctx, brokers, orders, tour...); err != nil {
			t.Fatal(err)
		}
	}
	marker := demoorders.Event{EventID: uuid.New(), SagaID: uuid.New(), OccurredAt: time.Now(),
		Order: demoorders.Order{ID: 9999, CustomerID: 1, Amount: "1.00", Currency: "RUB"}}
	if err := demoorders.Publish(ctx, brokers, orders, marker); err != nil {
		t.Fatal(err)
	}
	for svc.Count(t, `SELECT count(*) FROM order_projection WHERE order_id = 9999`) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the marker order was never projected")
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, o := range demoorders.Tour {
		if svc.Count(t, `SELECT count(*) FROM order_projection
			WHERE order_id = $1 AND customer_id = $2 AND amount = $3::numeric AND currency = $4`,
			o.ID, o.CustomerID, o.Amount, o.Currency) != 1 {
			t.Errorf("order %+v is not projected as the tour has it", o)
		}
	}
	if n := svc.Count(t, `SELECT count(*) FROM processed_event`); n != len(demoorders.Tour)+1 {
		t.Errorf("processed events = %d, want %d: each tour event once, and the marker", n, len(demoorders.Tour)+1)
	}

	// The tour's step 1.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL+"/payments", strings.NewReader(
		`{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer demo-secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "demo-key-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the tour's first charge: %s, want 201", resp.Status)
	}
}
