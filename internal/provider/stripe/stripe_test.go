package stripe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider/stripe"
	"github.com/example/payment-service/internal/stripefake"
)

const secretKey = "sk_test_adapter" //nolint:gosec // G101: a test key the fake accepts, no real account

func startFake(t *testing.T, cfg stripefake.Config) *stripefake.Server {
	t.Helper()
	cfg.SecretKey = secretKey
	return stripefake.StartForTest(t, cfg)
}

// client is the adapter on base, with the fake's key unless key says
// otherwise.
func client(t *testing.T, base string, key ...string) *stripe.Client {
	t.Helper()
	k := secretKey
	if len(key) > 0 {
		k = key[0]
	}
	// Timeout is what a call may take before it is unknown: far above what
	// any row takes on a loaded machine, below the fake's slow answer.
	c, err := stripe.New(stripe.Config{SecretKey: k, APIBase: base, ConnectTimeout: time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func money(t *testing.T, amount, currency string) domain.Money {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString(amount), domain.Currency(currency))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// payment is a payment of 10.50 EUR through Stripe under the reference
// external, paid with pm, reserved now.
func payment(t *testing.T, external, pm string) domain.Payment {
	t.Helper()
	c, err := domain.NewCharge(1, 1, money(t, "10.50", "EUR"), stripe.Name, domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	c.PaymentMethod = pm
	return domain.Payment{ID: 1, ClientID: "c", Charge: c, Status: domain.PaymentPending, CreatedAt: time.Now()}
}

// chargeOf is p's charge as the core asks for it.
func chargeOf(p domain.Payment) app.ProviderCharge {
	return app.ProviderCharge{IdempotencyKey: p.Charge.ProviderIdempotencyKey(), Charge: p.Charge, ReservedAt: p.CreatedAt}
}

// authorized is p as an authorization.
func authorized(p domain.Payment) domain.Payment {
	p.Charge.CaptureMethod = domain.CaptureManual
	return p
}

func captureOf(t *testing.T, p domain.Payment, amount, reference string) app.ProviderCapture {
	t.Helper()
	return app.ProviderCapture{IdempotencyKey: p.Charge.ProviderIdempotencyKey() + ":capture:" + reference,
		AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt,
		Amount: money(t, amount, "EUR"), Reference: reference}
}

func voidOf(p domain.Payment) app.ProviderVoid {
	return app.ProviderVoid{IdempotencyKey: p.Charge.ProviderIdempotencyKey() + ":void",
		AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt}
}

func refundOf(t *testing.T, p domain.Payment, amount, external string) app.ProviderRefund {
	t.Helper()
	p.Status = domain.PaymentSucceeded
	r, err := domain.NewRefund(p, money(t, amount, "EUR"), domain.ExternalRefundID(external))
	if err != nil {
		t.Fatal(err)
	}
	return app.ProviderRefund{IdempotencyKey: r.ProviderIdempotencyKey(), ChargeKey: p.Charge.ProviderIdempotencyKey(),
		PaymentKey: p.Charge.ProviderIdempotencyKey(), PaymentReservedAt: p.CreatedAt, Refund: r}
}

// outcome names the port's case an answer falls in.
func outcome(d app.ProviderDecision, err error) string {
	switch {
	case err == nil:
		return string(d)
	case errors.Is(err, app.ErrProviderRefused):
		return "refused"
	case errors.Is(err, app.ErrNoProviderCharge):
		return "no charge"
	case errors.Is(err, app.ErrProviderNotCharged):
		return "not charged"
	default:
		return "unknown"
	}
}

// must takes the answer of a call that prepares a test, and fails t
// unless it is approved.
func must(t *testing.T) func(app.ProviderDecision, error) {
	t.Helper()
	return func(d app.ProviderDecision, err error) {
		t.Helper()
		if d != app.ProviderApproved || err != nil {
			t.Fatalf("preparing: %s, %v", d, err)
		}
	}
}

// answeredBy is a server that answers every request with status and
// body, as something other than Stripe might, or Stripe with an answer
// this service did not ask for.
func answeredBy(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if strings.HasPrefix(body, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// piJSON is a PaymentIntent as Stripe writes it, for the rows that stand
// for an answer this service did not ask for.
func piJSON(key string, amount int, currency, status string) string {
	return `{"id":"pi_x","object":"payment_intent","amount":` + strconv.Itoa(amount) + `,"currency":"` + currency +
		`","status":"` + status + `","capture_method":"automatic","metadata":{"provider_key":"` + key + `"},"latest_charge":"ch_x"}`
}

// Every answer Stripe can give a call, over real HTTP against the
// stateful fake (or, for answers that are not Stripe's, a server that
// gives them), and the port's case it falls in. executed is how many
// requests under the call's key Stripe acted on, where the fake can tell.
func TestEveryAnswerSortsIntoTheOutcomeModel(t *testing.T) {
	t.Parallel()
	type call func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error)
	charge := func(external, pm string) call {
		return func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Charge(t.Context(), chargeOf(payment(t, external, pm)))
		}
	}
	authorize := func(external, pm string) call {
		return func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Authorize(t.Context(), chargeOf(authorized(payment(t, external, pm))))
		}
	}
	held := authorized(payment(t, "pi_held", stripefake.PMVisa))
	paid := payment(t, "pi_paid", stripefake.PMVisa)
	hold := func(t *testing.T, c *stripe.Client) { must(t)(c.Authorize(t.Context(), chargeOf(held))) }
	pay := func(t *testing.T, c *stripe.Client) { must(t)(c.Charge(t.Context(), chargeOf(paid))) }
	tests := []struct {
		name    string
		cfg     stripefake.Config
		base    func(t *testing.T) string // a server other than the fake
		key     string                    // the API key, if not the fake's
		prepare func(t *testing.T, f *stripefake.Server, c *stripe.Client)
		call    call
		want    string
		// sent is the provider key of the call; executed, how often the
		// fake acted under it (-1: not checked).
		sent     string
		executed int
	}{
		// Charges: the PaymentIntent's status, and Stripe's errors.
		{name: "succeeded", call: charge("pi_ok", stripefake.PMVisa), want: "APPROVED", sent: "stripe:pi_ok", executed: 1},
		{name: "402 card_error: a decline", call: charge("pi_declined", stripefake.PMDeclined), want: "DECLINED", sent: "stripe:pi_declined", executed: 1},
		{name: "requires_action (3-D Secure): a decline for a server-side charge", call: charge("pi_3ds", stripefake.PMThreeDSecure), want: "DECLINED", sent: "stripe:pi_3ds", executed: 1},
		{name: "processing: unknown, the webhook settles it", call: charge("pi_processing", stripefake.PMProcessing), want: "unknown", sent: "stripe:pi_processing", executed: 1},
		{name: "400 invalid_request_error: refused for good", call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			p := payment(t, "pi_chf", stripefake.PMVisa)
			p.Charge.Amount = money(t, "10.50", "CHF") // a currency the fake does not take
			return c.Charge(t.Context(), chargeOf(p))
		}, want: "refused", sent: "stripe:pi_chf", executed: 0},
		{name: "404 resource_missing (no such payment method): refused for good", call: charge("pi_nopm", "pm_unknown"), want: "refused", sent: "stripe:pi_nopm", executed: 0},
		{name: "idempotency_error: something was made under the key, unknown", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			p := payment(t, "pi_other", stripefake.PMVisa)
			p.Charge.Amount = money(t, "99.00", "EUR")
			must(t)(c.Charge(t.Context(), chargeOf(p)))
		}, call: charge("pi_other", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_other", executed: 1},
		{name: "409 idempotency_key_in_use: unknown", cfg: stripefake.Config{SlowDelay: 2 * time.Second}, prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			f.FailNext("stripe:pi_busy", stripefake.FaultBusy)
			go func() { _, _ = c.Charge(context.Background(), chargeOf(payment(t, "pi_busy", stripefake.PMVisa))) }()
			waitUntil(t, func() bool { return f.InFlight("stripe:pi_busy") })
		}, call: charge("pi_busy", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_busy", executed: -1},
		{name: "429: not now", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_429", stripefake.FaultRateLimit)
		}, call: charge("pi_429", stripefake.PMVisa), want: "not charged", sent: "stripe:pi_429", executed: 0},
		{name: "401: not now, nothing done", key: "sk_test_wrong", call: charge("pi_401", stripefake.PMVisa), want: "not charged", sent: "stripe:pi_401", executed: 0},
		{name: "403: not now, nothing done", base: func(t *testing.T) string {
			return answeredBy(t, 403, `{"error":{"type":"invalid_request_error","message":"The provided key does not have access"}}`)
		}, call: charge("pi_403", stripefake.PMVisa), want: "not charged", executed: -1},
		{name: "a saved 500 after acting: unknown", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_500", stripefake.Fault500)
		}, call: charge("pi_500", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_500", executed: 1},
		{name: "the saved 500 replayed: unknown still", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			f.FailNext("stripe:pi_500r", stripefake.Fault500)
			_, _ = c.Charge(t.Context(), chargeOf(payment(t, "pi_500r", stripefake.PMVisa)))
		}, call: charge("pi_500r", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_500r", executed: 1},
		{name: "a saved 500 before acting: unknown", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_500n", stripefake.Fault500Nothing)
		}, call: charge("pi_500n", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_500n", executed: 0},
		{name: "the answer lost after acting: unknown", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_drop", stripefake.FaultDrop)
		}, call: charge("pi_drop", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_drop", executed: 1},
		{name: "a timeout after acting: unknown", cfg: stripefake.Config{SlowDelay: 8 * time.Second}, prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_slow", stripefake.FaultSlow)
		}, call: charge("pi_slow", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_slow", executed: 1},
		{name: "a gateway's 502 after acting: unknown", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext("stripe:pi_502", stripefake.FaultGateway502)
		}, call: charge("pi_502", stripefake.PMVisa), want: "unknown", sent: "stripe:pi_502", executed: 1},
		{name: "a proxy's 404 page: not now", base: func(t *testing.T) string { return answeredBy(t, 404, `<html>Not Found</html>`) },
			call: charge("pi_404", stripefake.PMVisa), want: "not charged", executed: -1},
		{name: "a 200 that is not JSON: unknown", base: func(t *testing.T) string { return answeredBy(t, 200, `<html>ok</html>`) },
			call: charge("pi_html", stripefake.PMVisa), want: "unknown", executed: -1},
		{name: "a 200 for another amount: unknown", base: func(t *testing.T) string {
			return answeredBy(t, 200, piJSON("stripe:pi_amt", 9999, "eur", "succeeded"))
		},
			call: charge("pi_amt", stripefake.PMVisa), want: "unknown", executed: -1},
		{name: "a 200 in another currency: unknown", base: func(t *testing.T) string {
			return answeredBy(t, 200, piJSON("stripe:pi_cur", 1050, "usd", "succeeded"))
		},
			call: charge("pi_cur", stripefake.PMVisa), want: "unknown", executed: -1},
		{name: "a 200 for another key: unknown", base: func(t *testing.T) string {
			return answeredBy(t, 200, piJSON("stripe:someone_else", 1050, "eur", "succeeded"))
		},
			call: charge("pi_key", stripefake.PMVisa), want: "unknown", executed: -1},
		{name: "a 402 about another PaymentIntent: unknown", base: func(t *testing.T) string {
			return answeredBy(t, 402, `{"error":{"type":"card_error","code":"card_declined","payment_intent":`+piJSON("stripe:someone_else", 1050, "eur", "requires_payment_method")+`}}`)
		}, call: charge("pi_402x", stripefake.PMVisa), want: "unknown", executed: -1},
		{name: "canceled: nothing taken, a decline", base: func(t *testing.T) string {
			return answeredBy(t, 200, piJSON("stripe:pi_canceled", 1050, "eur", "canceled"))
		},
			call: charge("pi_canceled", stripefake.PMVisa), want: "DECLINED", executed: -1},
		{name: "connection refused: nothing sent, not now", base: func(t *testing.T) string {
			srv := httptest.NewServer(http.NotFoundHandler())
			srv.Close()
			return srv.URL
		}, call: charge("pi_refused", stripefake.PMVisa), want: "not charged", executed: -1},
		// What the adapter refuses before sending anything.
		{name: "an amount not in minor units: refused, nothing sent", call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			p := payment(t, "pi_frac", stripefake.PMVisa)
			p.Charge.Amount = money(t, "10.505", "EUR")
			return c.Charge(t.Context(), chargeOf(p))
		}, want: "refused", sent: "stripe:pi_frac", executed: 0},
		{name: "no payment method: refused, nothing sent", call: charge("pi_nothing", ""), want: "refused", sent: "stripe:pi_nothing", executed: 0},
		{name: "reserved longer ago than Stripe keeps a key: not sent", call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			p := payment(t, "pi_old", stripefake.PMVisa)
			p.CreatedAt = time.Now().Add(-25 * time.Hour)
			return c.Charge(t.Context(), chargeOf(p))
		}, want: "not charged", sent: "stripe:pi_old", executed: 0},
		// Authorizations.
		{name: "authorization requires_capture: approved", call: authorize("pa_ok", stripefake.PMVisa), want: "APPROVED", sent: "stripe:pa_ok", executed: 1},
		{name: "authorization declined", call: authorize("pa_declined", stripefake.PMDeclined), want: "DECLINED", sent: "stripe:pa_declined", executed: 1},
		{name: "authorization requires_action: declined", call: authorize("pa_3ds", stripefake.PMThreeDSecure), want: "DECLINED", sent: "stripe:pa_3ds", executed: 1},
		// Captures, voids and refunds of a PaymentIntent found by its key.
		{name: "capture in full", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { hold(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.Capture(t.Context(), captureOf(t, held, "10.50", "cp1"))
			}, want: "APPROVED", sent: captureKey(held, "cp1"), executed: 1},
		{name: "capture in part", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { hold(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.Capture(t.Context(), captureOf(t, held, "4.00", "cp2"))
			}, want: "APPROVED", sent: captureKey(held, "cp2"), executed: 1},
		{name: "capture above the hold: refused for good", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { hold(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.Capture(t.Context(), captureOf(t, held, "10.51", "cp3"))
			}, want: "refused", sent: captureKey(held, "cp3"), executed: 1},
		{name: "a second capture: refused for good", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			hold(t, c)
			must(t)(c.Capture(t.Context(), captureOf(t, held, "10.50", "cp4")))
		}, call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Capture(t.Context(), captureOf(t, held, "10.50", "cp5"))
		}, want: "refused", sent: captureKey(held, "cp5"), executed: 1},
		{name: "capture of an authorization Stripe does not have: not sent", call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Capture(t.Context(), captureOf(t, held, "10.50", "cp6"))
		}, want: "not charged", sent: captureKey(held, "cp6"), executed: 0},
		{name: "void", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { hold(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.Void(t.Context(), voidOf(held))
			},
			want: "APPROVED", sent: voidOf(held).IdempotencyKey, executed: 1},
		{name: "void of a captured hold: refused for good", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			hold(t, c)
			must(t)(c.Capture(t.Context(), captureOf(t, held, "10.50", "cp7")))
		}, call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Void(t.Context(), voidOf(held))
		},
			want: "refused", sent: voidOf(held).IdempotencyKey, executed: 1},
		{name: "refund", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { pay(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.Refund(t.Context(), refundOf(t, paid, "4.00", "re1"))
			}, want: "APPROVED", sent: refundOf(t, paid, "4.00", "re1").IdempotencyKey, executed: 1},
		{name: "refund reserved longer ago than Stripe keeps a key: not sent", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) { pay(t, c) },
			call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				req := refundOf(t, paid, "4.00", "re_old")
				req.ReservedAt = time.Now().Add(-25 * time.Hour)
				return c.Refund(t.Context(), req)
			}, want: "not charged", executed: 0},
		{name: "refund beyond what is left: refused for good", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			pay(t, c)
			must(t)(c.Refund(t.Context(), refundOf(t, paid, "10.00", "re2")))
		}, call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Refund(t.Context(), refundOf(t, paid, "1.00", "re3"))
		}, want: "refused", sent: refundOf(t, paid, "1.00", "re3").IdempotencyKey, executed: 1},
		{name: "refund pending: unknown, refund.updated settles it", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			pay(t, c)
			f.FailNext(refundOf(t, paid, "1.00", "re4").IdempotencyKey, stripefake.FaultRefundPending)
		}, call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Refund(t.Context(), refundOf(t, paid, "1.00", "re4"))
		}, want: "unknown", sent: refundOf(t, paid, "1.00", "re4").IdempotencyKey, executed: 1},
		{name: "refund's answer lost: unknown", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			pay(t, c)
			f.FailNext(refundOf(t, paid, "1.00", "re5").IdempotencyKey, stripefake.FaultDrop)
		}, call: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.Refund(t.Context(), refundOf(t, paid, "1.00", "re5"))
		}, want: "unknown", sent: refundOf(t, paid, "1.00", "re5").IdempotencyKey, executed: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, tc.cfg)
			base := f.URL
			if tc.base != nil {
				base = tc.base(t)
			}
			prep := client(t, f.URL)
			if tc.prepare != nil {
				tc.prepare(t, f, prep)
			}
			c := client(t, base)
			if tc.key != "" {
				c = client(t, base, tc.key)
			}
			if got := outcome(tc.call(t, c)); got != tc.want {
				d, err := tc.call(t, c)
				t.Fatalf("outcome = %s, want %s (%s %v)", got, tc.want, d, err)
			}
			if tc.executed >= 0 && tc.sent != "" {
				if n := f.Executed(stripe.IdempotencyKey(tc.sent)); n != tc.executed {
					t.Fatalf("Stripe acted %d times under the key, want %d", n, tc.executed)
				}
			}
		})
	}
}

func captureKey(p domain.Payment, reference string) string {
	return p.Charge.ProviderIdempotencyKey() + ":capture:" + reference
}

// waitUntil polls cond every 5 ms, 1,000 times at most.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for polls := 0; !cond(); polls++ {
		if polls == 1000 {
			t.Fatal("not there within 1,000 polls")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// net/http sends a POST again by itself when a reused keep-alive
// connection breaks and the request has GetBody and an Idempotency-Key,
// which stripe-go sets: the adapter's client must not, or a lost answer
// is hidden behind a second POST under the same key and its replayed
// success. Exactly one POST reaches Stripe, and the answer is unknown.
func TestNoHiddenResendOnAReusedConnection(t *testing.T) {
	t.Parallel()
	f := startFake(t, stripefake.Config{})
	c := client(t, f.URL)
	// The first call leaves a keep-alive connection in the pool; the next
	// goes out on it, and the fake drops it after acting.
	must(t)(c.Charge(t.Context(), chargeOf(payment(t, "pi_warm", stripefake.PMVisa))))
	f.FailNext("stripe:pi_reused", stripefake.FaultDrop)
	if got := outcome(c.Charge(t.Context(), chargeOf(payment(t, "pi_reused", stripefake.PMVisa)))); got != "unknown" {
		t.Fatalf("outcome = %s, want unknown: the answer was lost", got)
	}
	if n := f.Received("stripe:pi_reused"); n != 1 {
		t.Fatalf("Stripe received %d POSTs under the key, want exactly one", n)
	}
}
