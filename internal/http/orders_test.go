package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
)

// consumerEnv runs the service's order-projection consumer against a real
// Kafka-protocol broker, with the reader timers tuned for tests.
func consumerEnv(t *testing.T) (env map[string]string, brokers []string, topic string) {
	t.Helper()
	brokers = kafkatest.Brokers(t)
	topic = kafkatest.CreateTopic(t, brokers, 3)
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s" // a real broker's default minimum
	}
	return map[string]string{
		"KAFKA_BROKERS":                     brokers[0],
		"ORDER_EVENTS_TOPIC":                topic,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"ORDER_CONSUMER_GROUP":              "order-projection-" + uuid.NewString(),
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
	}, brokers, topic
}

// End to end: an OrderCreated.v1 published to Kafka becomes the order in
// the projection, a payment for it can then be charged (the charge checks
// the order against that projection), and the paying client then sees the
// order on GET /orders/{orderId}.
func TestOrderEventOnKafkaThenChargeSucceeds(t *testing.T) {
	t.Parallel()
	env, brokers, topic := consumerEnv(t)
	env["DEFAULT_CURRENCY"] = "EUR"
	s := startService(t, env)

	// Before the event, the order is unknown and cannot be charged.
	if r := s.request(t, http.MethodGet, "/orders/1001", "", nil); r.status != http.StatusNotFound {
		t.Fatalf("GET /orders/1001 before the event: %d %s", r.status, r.body)
	}
	if r := s.charge(t, "before", chargeBody(1001, 42, "100.50", "EUR", "pi_e2e_0")); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("charge before the event: %d %s, want 422 order-not-found", r.status, r.body)
	}

	eventID, sagaID := uuid.Must(uuid.NewV7()).String(), uuid.NewString()
	// The style guide's event: amount a JSON number, no currency (the
	// configured default applies).
	value := `{"eventId":"` + eventID + `","sagaId":"` + sagaID + `","eventType":"OrderCreated.v1",` +
		`"orderId":1001,"customerId":42,"amount":100.50,"occurredAt":"2026-11-29T10:00:00Z"}`
	p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, idempotent.Message{Key: []byte("1001"), Value: []byte(value)}); err != nil {
		t.Fatal(err)
	}

	// The charge is the wait: 422 order-not-found stores nothing, so the
	// same key is retried until the consumer has projected the order. An
	// order projected between phase 1's statement and its read of the
	// order is 409 request-in-progress (ChargePayment.claim: "the order
	// changed between the statements"), which also stores nothing and asks
	// for the same retry; before this loop retried it, it failed this test
	// in one CI run of many.
	var r response
	deadline := time.Now().Add(60 * time.Second)
	for {
		r = s.charge(t, "after", chargeBody(1001, 42, "100.50", "EUR", "pi_e2e_1"))
		retry := r.status == http.StatusUnprocessableEntity ||
			r.status == http.StatusConflict && strings.Contains(string(r.body), `"code":"request-in-progress"`)
		if !retry || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.status != http.StatusCreated {
		t.Fatalf("charge after the event: %d %s", r.status, r.body)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE order_id = 1001 AND status = 'SUCCEEDED'`); n != 1 {
		t.Errorf("payments for order 1001 = %d, want 1", n)
	}

	// Now that the client has a payment for it, it sees the order as the
	// event wrote it; another client does not.
	got := s.request(t, http.MethodGet, "/orders/1001", "", nil)
	if got.status != http.StatusOK {
		t.Fatalf("GET /orders/1001: %d %s", got.status, got.body)
	}
	if r := s.request(t, http.MethodGet, "/orders/1001", "", map[string]string{"Authorization": "Bearer " + otherKey}); r.status != http.StatusNotFound {
		t.Errorf("GET /orders/1001 by another client: %d %s, want 404", r.status, r.body)
	}
	var order map[string]any
	if err := json.Unmarshal(got.body, &order); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"orderId": 1001.0, "customerId": 42.0, "amount": "100.50", "currency": "EUR",
		"sagaId": sagaID, "lastEventId": eventID, "lastEventAt": "2026-11-29T10:00:00Z"}
	for k, v := range want {
		if order[k] != v {
			t.Errorf("order %s = %v, want %v (%s)", k, order[k], v, got.body)
		}
	}

	if n := s.count(t, `SELECT count(*) FROM processed_event WHERE event_id = $1`, eventID); n != 1 {
		t.Errorf("processed_event rows for the event = %d, want 1", n)
	}
	if r := s.request(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("/readyz: %d %s", r.status, r.body)
	}
	if v := s.metric(t, "order_events_applied_total"); v != 1 {
		t.Errorf("order_events_applied_total = %v, want 1", v)
	}
}

// Readiness answers for what the payment API needs, the database, and not
// for the background components: while the order consumer cannot apply a
// batch (here the processed_event table is renamed away, so every attempt
// fails though the database answers), /readyz stays 200 and payments go on,
// while /health and payment_component_healthy show the failing consumer.
// Once the table is back, the retried batch applies, once, and the
// component is healthy again.
func TestConsumerFailureShowsInHealthNotInReadiness(t *testing.T) {
	t.Parallel()
	env, brokers, topic := consumerEnv(t)
	env["KAFKA_CONSUMER_RETRY_BACKOFF"] = "20ms"
	env["KAFKA_CONSUMER_MAX_RETRY_BACKOFF"] = "200ms"
	s := startService(t, env)
	s.addOrder(t, 2001, 42, "10.00", "RUB")
	ctx := context.Background()

	waitStatus := func(path string, want int) response {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := s.request(t, http.MethodGet, path, "", nil)
			if r.status == want {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %s, want %d", path, r.status, r.body, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	healthOf := func() map[string]string {
		t.Helper()
		r := s.request(t, http.MethodGet, "/health", "", map[string]string{"Authorization": ""})
		if r.status != http.StatusOK {
			t.Fatalf("/health: %d %s", r.status, r.body)
		}
		var h struct {
			Status     string `json:"status"`
			Components []struct {
				Name   string `json:"name"`
				Status string `json:"status"`
				Error  string `json:"error"`
			} `json:"components"`
		}
		if err := json.Unmarshal(r.body, &h); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{"": h.Status}
		for _, c := range h.Components {
			out[c.Name] = c.Status
		}
		return out
	}
	waitStatus("/readyz", http.StatusOK)
	eventuallyTrue(t, "every component healthy", func() bool {
		h := healthOf()
		return h[""] == "ok" && h["database"] == "ok" && h["order-consumer"] == "ok" && h["outbox-relay"] == "ok"
	})

	if _, err := s.db.Exec(ctx, `ALTER TABLE processed_event RENAME TO processed_event_away`); err != nil {
		t.Fatal(err)
	}
	eventID := uuid.Must(uuid.NewV7()).String()
	value := `{"eventId":"` + eventID + `","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,` +
		`"amount":"100.50","currency":"RUB","occurredAt":"2026-11-29T10:00:00Z"}`
	p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.Publish(pctx, idempotent.Message{Key: []byte("1001"), Value: []byte(value)}); err != nil {
		t.Fatal(err)
	}

	eventuallyTrue(t, "/health to show the failing consumer", func() bool {
		h := healthOf()
		return h[""] == "degraded" && h["order-consumer"] == "failing" && h["database"] == "ok"
	})
	if v := s.metric(t, `payment_component_healthy{component="order-consumer"}`); v != 0 {
		t.Errorf(`payment_component_healthy{component="order-consumer"} = %v, want 0`, v)
	}
	if r := s.request(t, http.MethodGet, "/readyz", "", nil); r.status != http.StatusOK {
		t.Errorf("/readyz while the consumer fails: %d %s, want 200: the payment API does not need the consumer", r.status, r.body)
	}
	if r := s.charge(t, "while-consumer-fails", chargeBody(2001, 42, "10.00", "RUB", "pi_health")); r.status != http.StatusCreated {
		t.Errorf("charge while the consumer fails: %d %s", r.status, r.body)
	}
	if n := s.count(t, `SELECT count(*) FROM order_projection WHERE order_id = 1001`); n != 0 {
		t.Errorf("the event was applied while processed_event was away")
	}
	if v := s.metric(t, `order_events_retries_total{step="applying order events"}`); v == 0 {
		t.Error("no retry counted")
	}

	if _, err := s.db.Exec(ctx, `ALTER TABLE processed_event_away RENAME TO processed_event`); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "the event to be applied", func() bool {
		return s.count(t, `SELECT count(*) FROM order_projection WHERE order_id = 1001`) == 1
	})
	eventuallyTrue(t, "the consumer to be healthy again", func() bool { return healthOf()["order-consumer"] == "ok" })
	if v := s.metric(t, `payment_component_healthy{component="order-consumer"}`); v != 1 {
		t.Errorf(`payment_component_healthy{component="order-consumer"} = %v, want 1`, v)
	}
	if n := s.count(t, `SELECT count(*) FROM processed_event WHERE event_id = $1`, eventID); n != 1 {
		t.Errorf("processed_event rows for the event = %d, want 1", n)
	}
	if v := s.metric(t, "order_events_applied_total"); v != 1 {
		t.Errorf("order_events_applied_total = %v, want 1", v)
	}
}

// eventuallyTrue polls cond until it holds, failing t after a minute.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// GET /orders/{orderId} shows an order only to a client that has a payment
// for it (any status): orders carry customer ids, amounts and saga ids, and
// no client should read another's. To every other client the order does
// not exist: the same 404, byte for byte, as an order nobody knows.
func TestOrderIsVisibleOnlyToAClientWithAPaymentForIt(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "5.00", "RUB")
	other := map[string]string{"Authorization": "Bearer " + otherKey}
	unknown := s.request(t, http.MethodGet, "/orders/999999", "", nil)
	wantProblem(t, unknown, http.StatusNotFound, "order-not-found")

	get := func(order string, headers map[string]string) response {
		t.Helper()
		return s.request(t, http.MethodGet, "/orders/"+order, "", headers)
	}
	hidden := func(name string, r response) {
		t.Helper()
		if r.status != http.StatusNotFound || !bytes.Equal(r.body, unknown.body) {
			t.Errorf("%s: %d %s, want the 404 of an unknown order", name, r.status, r.body)
		}
	}
	hidden("before any payment, the client", get("1001", nil))
	hidden("before any payment, another client", get("1001", other))

	if r := s.charge(t, "k-1001", chargeBody(1001, 42, "100.50", "RUB", "pi_vis_1")); r.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	if r := s.charge(t, "k-1002", chargeBody(1002, 42, "5.00", "RUB", "decline_vis_2")); r.status != http.StatusPaymentRequired {
		t.Fatalf("declined charge: %d %s", r.status, r.body)
	}
	for _, order := range []string{"1001", "1002"} {
		r := get(order, nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"orderId":`+order) {
			t.Errorf("the paying client, order %s: %d %s, want 200", order, r.status, r.body)
		}
		hidden("another client, order "+order, get(order, other))
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE client_id = 'demo-client'`); n != 2 {
		t.Errorf("payments = %d, want 2", n)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE client_id = 'other-client'`); n != 0 {
		t.Errorf("the other client has %d payments, want 0", n)
	}
}
