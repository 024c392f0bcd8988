package stripe_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/stripe"
	"github.com/example/payment-service/internal/stripefake"
)

const webhookSecret = "whsec_test_adapter" //nolint:gosec // G101: the test's own secret

// A delivery is read only when it is signed with the secret, recently, and
// of the pinned API version; the signature over other bytes, an old one,
// or another version is refused, and nothing is read.
func TestEventVerification(t *testing.T) {
	t.Parallel()
	f := startFake(t, stripefake.Config{WebhookSecret: webhookSecret})
	must(t)(client(t, f.URL).Charge(t.Context(), chargeOf(payment(t, "pi_hook", stripefake.PMVisa))))
	body := f.Events()[0].Body
	otherVersion := []byte(strings.Replace(string(body), stripego.APIVersion, "2026-08-26.dahlia", 1))
	now := time.Now()
	tests := []struct {
		name      string
		body      []byte
		signature string
		want      error // nil: read
	}{
		{"signed now", body, stripefake.Sign(body, webhookSecret, now), nil},
		{"signed 4 minutes ago", body, stripefake.Sign(body, webhookSecret, now.Add(-4*time.Minute)), nil},
		{"signed with another secret", body, stripefake.Sign(body, "whsec_other", now), app.ErrEventNotAuthentic},
		{"another body", append([]byte(" "), body...), stripefake.Sign(body, webhookSecret, now), app.ErrEventNotAuthentic},
		{"stale: signed 6 minutes ago", body, stripefake.Sign(body, webhookSecret, now.Add(-6*time.Minute)), app.ErrEventNotAuthentic},
		{"not signed", body, "", app.ErrEventNotAuthentic},
		{"a malformed header", body, "t=abc,v1", app.ErrEventNotAuthentic},
		{"another API version", otherVersion, stripefake.Sign(otherVersion, webhookSecret, now), app.ErrEventInvalid},
		{"not JSON", []byte("{"), stripefake.Sign([]byte("{"), webhookSecret, now), app.ErrEventInvalid},
	}
	r := stripe.NewEventReader(webhookSecret)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := r.Read(tc.body, tc.signature)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == nil && (ev.Decision != app.ProviderApproved || ev.ProviderKey != "stripe:pi_hook"):
				t.Fatalf("read %+v", ev)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// What each event the fake makes reads as: the object, the decision, the
// key of ours it names and the amount; or a note, acknowledged and not
// applied.
func TestEventsReadAsTheOutcomesTheyReport(t *testing.T) {
	t.Parallel()
	p := payment(t, "pi_ev", stripefake.PMVisa)
	a := authorized(payment(t, "pa_ev", stripefake.PMVisa))
	tests := []struct {
		name    string
		act     func(t *testing.T, f *stripefake.Server, c *stripe.Client)
		typ     string // the event read
		object  app.ProviderObject
		verdict app.ProviderDecision
		key     string
		amount  string // "": a note
	}{
		{"a charge", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
		},
			"payment_intent.succeeded", app.ObjectCharge, app.ProviderApproved, "stripe:pi_ev", "10.5"},
		{"a decline", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			_, _ = c.Charge(t.Context(), chargeOf(payment(t, "pi_ev", stripefake.PMDeclined)))
		}, "payment_intent.payment_failed", app.ObjectCharge, app.ProviderDeclined, "stripe:pi_ev", "10.5"},
		{"an authorization", holdFor(a), "payment_intent.amount_capturable_updated", app.ObjectAuthorization, app.ProviderApproved, "stripe:pa_ev", "10.5"},
		{"a partial capture", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Capture(t.Context(), captureOf(t, a, "4.00", "cp")))
		}, "payment_intent.succeeded", app.ObjectCapture, app.ProviderApproved, captureKey(a, "cp"), "4"},
		{"a void", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Void(t.Context(), voidOf(a)))
		}, "payment_intent.canceled", app.ObjectVoid, app.ProviderApproved, voidOf(a).IdempotencyKey, "10.5"},
		{"a lapse: noted", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			lapse(t, f, a)
		}, "payment_intent.canceled", "", "", "", ""},
		{"requires_action, a type not read: noted", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			_, _ = c.Charge(t.Context(), chargeOf(payment(t, "pi_ev", stripefake.PMThreeDSecure)))
		}, "payment_intent.requires_action", "", "", "", ""},
		{"a refund", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			must(t)(c.Refund(t.Context(), refundOf(t, p, "1.00", "re")))
		}, "refund.created", app.ObjectRefund, app.ProviderApproved, "refund:stripe:re", "1"},
		{"a pending refund: noted", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			f.FailNext(refundOf(t, p, "1.00", "re").IdempotencyKey, stripefake.FaultRefundPending)
			_, _ = c.Refund(t.Context(), refundOf(t, p, "1.00", "re"))
		}, "refund.created", "", "", "", ""},
		{"a failed refund", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			f.FailNext(refundOf(t, p, "1.00", "re").IdempotencyKey, stripefake.FaultRefundPending)
			_, _ = c.Refund(t.Context(), refundOf(t, p, "1.00", "re"))
			id, _, _, _ := f.RefundByMetadata("provider_key", "refund:stripe:re")
			if err := f.SettleRefund(id, false); err != nil {
				t.Fatal(err)
			}
		}, "refund.updated", app.ObjectRefund, app.ProviderDeclined, "refund:stripe:re", "1"},
		{"charge.refunded, which names no refund: noted", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			must(t)(c.Refund(t.Context(), refundOf(t, p, "10.50", "re")))
		}, "charge.refunded", "", "", "", ""},
	}
	r := stripe.NewEventReader(webhookSecret)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, stripefake.Config{WebhookSecret: webhookSecret})
			tc.act(t, f, client(t, f.URL))
			var found bool
			for _, e := range f.Events() {
				if e.Type != tc.typ {
					continue
				}
				found = true
				ev, err := r.Read(e.Body, stripefake.Sign(e.Body, webhookSecret, time.Now()))
				if err != nil {
					t.Fatal(err)
				}
				if tc.amount == "" {
					if ev.Decision != "" || ev.Note == "" {
						t.Fatalf("%s read %+v, want a note", e.Type, ev)
					}
					continue
				}
				if ev.Object != tc.object || ev.Decision != tc.verdict || ev.ProviderKey != tc.key || ev.Amount.String() != tc.amount || ev.Currency != "EUR" || ev.ID != e.ID {
					t.Fatalf("%s read %s %s %q %s %s, want %s %s %q %s EUR", e.Type, ev.Object, ev.Decision, ev.ProviderKey, ev.Amount, ev.Currency,
						tc.object, tc.verdict, tc.key, tc.amount)
				}
			}
			if !found {
				t.Fatalf("no %s event among %d", tc.typ, len(f.Events()))
			}
		})
	}
}
