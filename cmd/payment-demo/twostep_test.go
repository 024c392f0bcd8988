package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// The demo's two-step steps against the real service, its order consumer
// and the sandbox provider: each order is published and authorized once
// projected, the capture takes 60.00 and its replay nothing more, the
// refund gives back 20.00 of the capture and refuses more than is left
// of it, the void releases the second hold and a capture of it is
// refused; the demo fails if any answer differs. The provider's ledger is
// the judge: one hold captured once for 60.00, refunded 20.00, and one
// hold voided once.
func TestDemoTwoStepCapturesPartAndVoidsOnce(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	tp := demoTopics(t, brokers)
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s" // a real broker's least session timeout
	}
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"ORDER_EVENTS_TOPIC":                tp.orders,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_EVENTS_TOPIC":              tp.events,
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
	}})
	d, err := newDemo(svc.URL, "demo-secret", svc.Provider.URL, brokers)
	if err != nil {
		t.Fatal(err)
	}
	d.topics = tp
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const captured, voided = 6001, 7001
	if err := d.twoStep(ctx, captured, voided); err != nil {
		t.Fatalf("the two-step steps: %v", err)
	}

	held := svc.Provider.NetCaptured("pi_demo_hold_6001")
	if len(held.Violations) > 0 || held.Authorizations != 1 || held.Captures != 1 || held.Voids != 0 ||
		held.Captured.StringFixed(2) != "60.00" || held.Refunded.StringFixed(2) != "20.00" {
		t.Errorf("the captured order at the provider: %+v; want one hold, captured once for 60.00, 20.00 of it refunded", held)
	}
	released := svc.Provider.NetCaptured("pi_demo_hold_7001")
	if len(released.Violations) > 0 || released.Authorizations != 1 || released.Captures != 0 || released.Voids != 1 {
		t.Errorf("the voided order at the provider: %+v; want one hold, voided once, never captured", released)
	}
	for _, row := range []struct {
		order  int64
		status string
	}{{captured, "SUCCEEDED"}, {voided, "VOIDED"}} {
		if n := svc.Count(t, `SELECT count(*) FROM payment WHERE order_id = $1 AND status = $2 AND capture_method = 'manual'`, row.order, row.status); n != 1 {
			t.Errorf("order %d: %d %s two-step payments, want 1", row.order, n, row.status)
		}
	}
	if n := svc.Count(t, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED' AND amount = 20.00`); n != 1 {
		t.Errorf("%d refunds of 20.00, want 1", n)
	}
}
