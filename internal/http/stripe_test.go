package http_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/stripefake"
	"github.com/example/payment-service/internal/testdb"
)

// startStripe runs the real service charging through a stateful Stripe
// fake (servicetest.Options.Stripe).
func startStripe(t *testing.T, o servicetest.StripeOptions) (*testService, *stripefake.Server) {
	t.Helper()
	s := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Stripe: &o})
	t.Cleanup(func() { checkOutboxContract(t, s.DB) })
	return &testService{url: s.URL, db: s.DB}, s.Stripe
}

// stripeCharge is a charge body through Stripe, paid with pm.
func stripeCharge(order int64, amount, currency, external, pm string, manual bool) string {
	body := fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":%q,"currency":%q,"paymentProvider":"stripe","externalPaymentId":%q`,
		order, amount, currency, external)
	if pm != "" {
		body += `,"paymentMethod":"` + pm + `"`
	}
	if manual {
		body += `,"captureMethod":"manual"`
	}
	return body + "}"
}

// A charge, an authorization captured in part, one voided, a refund, and
// what Stripe declines or the service refuses, end to end through the real
// service against the stateful fake: each answer, each payment's status,
// and what Stripe holds.
func TestStripeEndToEnd(t *testing.T) {
	t.Parallel()
	s, fake := startStripe(t, servicetest.StripeOptions{})
	for id, o := range map[int64][2]string{9301: {"10.50", "EUR"}, 9302: {"100.00", "EUR"}, 9303: {"50.00", "EUR"}, 9304: {"10.50", "EUR"},
		9305: {"10.50", "EUR"}, 9306: {"10.505", "EUR"}, 9307: {"10.50", "EUR"}, 9308: {"500", "JPY"}} {
		s.addOrder(t, id, 42, o[0], o[1])
	}
	pi := func(external string) stripefake.PaymentIntent {
		t.Helper()
		p, ok := fake.PaymentIntentByMetadata("provider_key", "stripe:"+external)
		if !ok {
			t.Fatalf("Stripe holds no PaymentIntent for %s", external)
		}
		return p
	}

	// A charge, then a refund of part of it.
	r := s.charge(t, "st-1", stripeCharge(9301, "10.50", "EUR", "pi_st_charge", stripefake.PMVisa, false))
	charged := paymentOf(t, r)
	if r.status != http.StatusCreated || charged.Status != "SUCCEEDED" {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	if p := pi("pi_st_charge"); p.Status != "succeeded" || p.Amount != 1050 || p.Currency != "eur" || p.Metadata["external_payment_id"] != "pi_st_charge" {
		t.Fatalf("Stripe holds %+v", p)
	}
	if r := s.refund(t, charged.ID, "st-1r", refundBody("4.00", "re_st")); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	if _, status, amount, ok := fake.RefundByMetadata("provider_key", "refund:stripe:re_st"); !ok || status != "succeeded" || amount != 400 {
		t.Fatalf("Stripe's refund: %s %d %v", status, amount, ok)
	}

	// An authorization, captured in part: the rest is released.
	r = s.charge(t, "st-2", stripeCharge(9302, "100.00", "EUR", "pa_st_capture", stripefake.PMVisa, true))
	held := paymentOf(t, r)
	if r.status != http.StatusCreated || held.Status != "AUTHORIZED" || pi("pa_st_capture").Status != "requires_capture" {
		t.Fatalf("authorize: %d %s", r.status, r.body)
	}
	r = s.capture(t, held.ID, "st-2c", captureBody("60.00", "EUR", "cp_st"))
	if p := paymentOf(t, r); r.status != http.StatusCreated || p.Status != "SUCCEEDED" || p.CapturedAmount != "60.00" {
		t.Fatalf("capture: %d %s", r.status, r.body)
	}
	if p := pi("pa_st_capture"); p.Status != "succeeded" || p.AmountReceived != 6000 || p.AmountCapturable != 0 {
		t.Fatalf("Stripe holds %+v after the capture", p)
	}

	// An authorization voided.
	r = s.charge(t, "st-3", stripeCharge(9303, "50.00", "EUR", "pa_st_void", stripefake.PMVisa, true))
	voided := paymentOf(t, r)
	if r := s.void(t, voided.ID, "st-3v"); r.status != http.StatusCreated || paymentOf(t, r).Status != "VOIDED" {
		t.Fatalf("void: %d %s", r.status, r.body)
	}
	if p := pi("pa_st_void"); p.Status != "canceled" {
		t.Fatalf("Stripe holds %+v after the void", p)
	}

	// Stripe's declines, and what the service refuses.
	tests := []struct {
		name, key, body string
		status          int
		code            string
		sent            bool // a PaymentIntent was made
	}{
		{"declined", "st-4", stripeCharge(9304, "10.50", "EUR", "pi_st_declined", stripefake.PMDeclined, false), 402, "payment-declined", true},
		{"3-D Secure asked for", "st-5", stripeCharge(9305, "10.50", "EUR", "pi_st_3ds", stripefake.PMThreeDSecure, false), 402, "payment-declined", true},
		{"an amount not in minor units", "st-6", stripeCharge(9306, "10.505", "EUR", "pi_st_frac", stripefake.PMVisa, false), 422, "amount-not-in-minor-units", false},
		{"no payment method", "st-7", stripeCharge(9307, "10.50", "EUR", "pi_st_nopm", "", false), 402, "payment-failed", false},
		{"the sandbox, not offered here", "st-8", chargeBody(9307, 42, "10.50", "EUR", "pi_st_sandbox"), 422, "provider-not-offered", false},
	}
	for _, tc := range tests {
		r := s.charge(t, tc.key, tc.body)
		if r.status != tc.status || codeOf(r) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
		external := tc.body[strings.Index(tc.body, `"externalPaymentId":"`)+len(`"externalPaymentId":"`):]
		external = external[:strings.Index(external, `"`)]
		if _, made := fake.PaymentIntentByMetadata("provider_key", "stripe:"+external); made != tc.sent {
			t.Errorf("%s: a PaymentIntent made = %v, want %v", tc.name, made, tc.sent)
		}
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_st_frac'`); n != 0 {
		t.Fatalf("the amount refused before anything was stored left %d payments", n)
	}

	// A refund and a capture the provider cannot take in minor units.
	if r := s.refund(t, charged.ID, "st-1r2", refundBody("0.005", "re_st_frac")); r.status != 422 || codeOf(r) != "amount-not-in-minor-units" {
		t.Fatalf("refund of 0.005 EUR: %d %s", r.status, r.body)
	}

	// A zero-decimal currency goes as it is.
	if r := s.charge(t, "st-9", stripeCharge(9308, "500", "JPY", "pi_st_jpy", stripefake.PMVisa, false)); r.status != http.StatusCreated {
		t.Fatalf("charge in JPY: %d %s", r.status, r.body)
	}
	if p := pi("pi_st_jpy"); p.Amount != 500 || p.Currency != "jpy" {
		t.Fatalf("Stripe holds %+v for 500 JPY", p)
	}
}

// A charge whose answer is lost (Stripe made the PaymentIntent) is 503
// outcome-unknown; its retry, with the same key and body, meets a 429,
// which says nothing of the first request, so the service asks Stripe's
// List: it finds the PaymentIntent, succeeded, and records it. One
// PaymentIntent, one POST that Stripe acted on; no webhook in play.
func TestStripeLostAnswerSettledByTheRetrysLookup(t *testing.T) {
	t.Parallel()
	s, fake := startStripe(t, servicetest.StripeOptions{NoWebhooks: true})
	s.addOrder(t, 9311, 42, "10.50", "EUR")
	body := stripeCharge(9311, "10.50", "EUR", "pi_st_lost", stripefake.PMVisa, false)
	fake.FailNext("stripe:pi_st_lost", stripefake.FaultDrop, stripefake.FaultRateLimit)
	if r := s.charge(t, "st-lost", body); r.status != http.StatusServiceUnavailable || codeOf(r) != "outcome-unknown" {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_st_lost' AND status = 'PENDING'`); n != 1 {
		t.Fatalf("%d PENDING payments after the lost answer, want 1", n)
	}
	r := s.charge(t, "st-lost", body)
	if r.status != http.StatusCreated || paymentOf(t, r).Status != "SUCCEEDED" {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	if fake.Executed("stripe:pi_st_lost") != 1 || fake.Received("stripe:pi_st_lost") != 2 || fake.PaymentIntents() != 1 {
		t.Fatalf("Stripe acted %d times on %d POSTs and holds %d PaymentIntents; want 1, 2, 1",
			fake.Executed("stripe:pi_st_lost"), fake.Received("stripe:pi_st_lost"), fake.PaymentIntents())
	}
}

// A charge whose answer is lost, or answered with the 500 Stripe saves and
// replays, is settled by Stripe's event: payment_intent.succeeded is
// delivered to /webhooks/stripe, applied once, and the retry gets the
// answer it recorded. A refund's lost answer is settled the same way by
// refund.created. No retry reaches Stripe before the event is applied, so
// only the event can have settled them; the event may even be applied
// while the request is still out, and the request then answers what it
// recorded (decision 0021).
func TestStripeLostAnswerSettledByTheWebhook(t *testing.T) {
	t.Parallel()
	s, fake := startStripe(t, servicetest.StripeOptions{})
	for _, tc := range []struct {
		order    int64
		external string
		fault    stripefake.Fault
	}{
		{9321, "pi_st_hook_drop", stripefake.FaultDrop},
		{9322, "pi_st_hook_500", stripefake.Fault500},
	} {
		s.addOrder(t, tc.order, 42, "10.50", "EUR")
		body := stripeCharge(tc.order, "10.50", "EUR", tc.external, stripefake.PMVisa, false)
		fake.FailNext("stripe:"+tc.external, tc.fault)
		if r := s.charge(t, "hook-"+tc.external, body); !unknownOr201(r) {
			t.Fatalf("%s: first %d %s", tc.external, r.status, r.body)
		}
		waitFor(t, func() bool {
			return s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = $1 AND status = 'SUCCEEDED'`, tc.external) == 1
		})
		r := s.charge(t, "hook-"+tc.external, body)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: the retry after the webhook: %d %s", tc.external, r.status, r.body)
		}
		if n := fake.Executed("stripe:" + tc.external); n != 1 {
			t.Fatalf("%s: Stripe acted %d times", tc.external, n)
		}
	}
	id := paymentOf(t, s.charge(t, "hook-pi_st_hook_drop", stripeCharge(9321, "10.50", "EUR", "pi_st_hook_drop", stripefake.PMVisa, false))).ID
	fake.FailNext("refund:stripe:re_st_hook", stripefake.FaultDrop)
	if r := s.refund(t, id, "hook-re", refundBody("1.00", "re_st_hook")); !unknownOr201(r) {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	waitFor(t, func() bool {
		return s.count(t, `SELECT count(*) FROM refund WHERE external_refund_id = 're_st_hook' AND status = 'SUCCEEDED'`) == 1
	})
	if n := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer_name = 'webhook:stripe'`); n == 0 {
		t.Fatal("no Stripe event recorded in processed_event under webhook:stripe")
	}
}

// unknownOr201 is the answer of a call whose answer was lost: unknown,
// or the outcome the provider's event recorded while it was out.
func unknownOr201(r response) bool {
	return r.status == http.StatusServiceUnavailable && codeOf(r) == "outcome-unknown" || r.status == http.StatusCreated
}

// Deliveries the service refuses: another API version (400, logged), a
// bad signature (401); and one it acknowledges without applying: a type
// it does not read.
func TestStripeWebhookRefusals(t *testing.T) {
	t.Parallel()
	s, _ := startStripe(t, servicetest.StripeOptions{NoWebhooks: true})
	event := func(typ, version string) []byte {
		return []byte(`{"id":"evt_st_1","object":"event","api_version":"` + version + `","created":1,"livemode":false,"pending_webhooks":1,"type":"` + typ +
			`","data":{"object":{"id":"pi_1","object":"payment_intent","metadata":{}}}}`)
	}
	tests := []struct {
		name   string
		body   []byte
		secret string
		status int
		code   string
	}{
		{"another API version", event("payment_intent.succeeded", "2026-08-26.dahlia"), servicetest.StripeWebhookSecret, 400, "webhook-event-invalid"},
		{"another secret", event("payment_intent.succeeded", stripego.APIVersion), "whsec_someone_else_0123", 401, "webhook-signature-invalid"},
		{"a type the service does not read", event("customer.created", stripego.APIVersion), servicetest.StripeWebhookSecret, 200, ""},
		{"a PaymentIntent the service did not make", event("payment_intent.succeeded", stripego.APIVersion), servicetest.StripeWebhookSecret, 200, ""},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodPost, s.url+"/webhooks/stripe", bytes.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", stripefake.Sign(tc.body, tc.secret, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
}
