package main

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
	"github.com/example/payment-service/pkg/paymentclient"
)

// The demo's refund steps, against the real service and each provider (the
// sandbox, and the Stripe fake as make dev PAYMENT_PROVIDER=stripe runs
// it), the demo telling them apart as it does against make dev: they pass
// on a fresh payment (the replay is the stored answer, the refund beyond
// what is left is refused, the list holds the one refund, the provider's
// own record of it is read), and the provider refunded 30.00 once although
// the demo asked twice.
func TestDemoRefundsPartOfThePaymentOnce(t *testing.T) {
	t.Parallel()
	for _, name := range []string{providerSandbox, providerStripe} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := servicetest.Options{DSN: testdb.New(t)}
			if name == providerStripe {
				o.Stripe = &servicetest.StripeOptions{}
			}
			svc := servicetest.Start(t, o)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := svc.DB.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`); err != nil {
				t.Fatal(err)
			}
			providerURL := providerOf(svc)
			d, err := newDemo(svc.URL, "demo-secret", providerURL, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.prov.name = detectProvider(ctx, providerURL, ""); d.prov.name != name {
				t.Fatalf("the demo takes the provider at %s for %s, want %s", providerURL, d.prov.name, name)
			}
			d.prov.key = servicetest.StripeSecretKey
			charged, err := d.client.Charge(ctx, paymentclient.NewIdempotencyKey(), d.prov.charge(1001, "pi_demo_refund"))
			if err != nil {
				t.Fatal(err)
			}

			if err := d.refund(ctx, charged.Payment, "demo-refund-key"); err != nil {
				t.Fatalf("the refund steps: %v", err)
			}

			if name == providerSandbox {
				refunds, total := svc.Provider.Ledger().Refunded("pi_demo_refund")
				if len(refunds) != 1 || total.StringFixed(2) != "30.00" {
					t.Errorf("the provider refunded %v (%s); want one refund of 30.00", refunds, total)
				}
			} else if refunds := svc.Stripe.Ledger().Refunds; len(refunds) != 1 || refunds[0].Amount != 3000 || refunds[0].Status != "succeeded" {
				t.Errorf("Stripe refunded %+v; want one refund of 3000 (30.00 RUB)", refunds)
			}
			if got := svc.Count(t, `SELECT count(*) FROM refund WHERE payment_id = $1`, charged.Payment.ID); got != 1 {
				t.Errorf("refund rows = %d, want 1", got)
			}
			if got := svc.Count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1'`); got != 1 {
				t.Errorf("PaymentRefunded.v1 events = %d, want 1", got)
			}
		})
	}
}

// providerOf is the URL of the provider svc charges through, the sandbox
// or the Stripe fake.
func providerOf(svc *servicetest.Service) string {
	if svc.Provider != nil {
		return svc.Provider.URL
	}
	return svc.Stripe.URL
}
