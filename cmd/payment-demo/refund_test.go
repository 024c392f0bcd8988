package main

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
	"github.com/example/payment-service/pkg/paymentclient"
)

// The demo's refund steps, against the real service and sandbox provider:
// they pass on a fresh payment (the replay is the stored answer, the
// refund beyond what is left is refused, the list holds the one refund),
// and the provider refunded 30.00 once although the demo asked twice.
func TestDemoRefundsPartOfThePaymentOnce(t *testing.T) {
	t.Parallel()
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := svc.DB.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`); err != nil {
		t.Fatal(err)
	}
	d, err := newDemo(svc.URL, "demo-secret", svc.Provider.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	charged, err := d.client.Charge(ctx, paymentclient.NewIdempotencyKey(), demoCharge(1001, "pi_demo_refund"))
	if err != nil {
		t.Fatal(err)
	}

	if err := d.refund(ctx, charged.Payment, "demo-refund-key"); err != nil {
		t.Fatalf("the refund steps: %v", err)
	}

	refunds, total := svc.Provider.Ledger().Refunded("pi_demo_refund")
	if len(refunds) != 1 || total.StringFixed(2) != "30.00" {
		t.Errorf("the provider refunded %v (%s); want one refund of 30.00", refunds, total)
	}
	if got := svc.Count(t, `SELECT count(*) FROM refund WHERE payment_id = $1`, charged.Payment.ID); got != 1 {
		t.Errorf("refund rows = %d, want 1", got)
	}
	if got := svc.Count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1'`); got != 1 {
		t.Errorf("PaymentRefunded.v1 events = %d, want 1", got)
	}
}
