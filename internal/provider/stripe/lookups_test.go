package stripe_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider/stripe"
	"github.com/example/payment-service/internal/stripefake"
)

// The lookups, against the fake's List (strongly consistent) and, for the
// PaymentIntent a modification names, its Search (which lags): what each
// finds, and that "nothing" is ErrNoProviderCharge (which the outcome
// model never takes as a proof at Stripe) or, where the lookup cannot
// tell, unknown.
func TestLookups(t *testing.T) {
	t.Parallel()
	p := payment(t, "pi_look", stripefake.PMVisa)
	a := authorized(payment(t, "pa_look", stripefake.PMVisa))
	tests := []struct {
		name    string
		cfg     stripefake.Config
		pages   int // MaxLookupPages; 0: the default
		prepare func(t *testing.T, f *stripefake.Server, c *stripe.Client)
		lookup  func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error)
		want    string
	}{
		{name: "charge found", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
		},
			lookup: lookupCharge(p), want: "APPROVED"},
		{name: "charge found after its answer was lost", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			f.FailNext(p.Charge.ProviderIdempotencyKey(), stripefake.FaultDrop)
			_, _ = c.Charge(t.Context(), chargeOf(p))
		}, lookup: lookupCharge(p), want: "APPROVED"},
		{name: "charge found after a saved 500", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			f.FailNext(p.Charge.ProviderIdempotencyKey(), stripefake.Fault500)
			_, _ = c.Charge(t.Context(), chargeOf(p))
		}, lookup: lookupCharge(p), want: "APPROVED"},
		{name: "nothing after a saved 500 that made nothing: not a proof", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			f.FailNext(p.Charge.ProviderIdempotencyKey(), stripefake.Fault500Nothing)
			_, _ = c.Charge(t.Context(), chargeOf(p))
		}, lookup: lookupCharge(p), want: "no charge"},
		{name: "none", lookup: lookupCharge(p), want: "no charge"},
		{name: "declined", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			_, _ = c.Charge(t.Context(), chargeOf(payment(t, "pi_look", stripefake.PMDeclined)))
		}, lookup: lookupCharge(p), want: "DECLINED"},
		{name: "processing: unknown", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			_, _ = c.Charge(t.Context(), chargeOf(payment(t, "pi_look", stripefake.PMProcessing)))
		}, lookup: lookupCharge(p), want: "unknown"},
		{name: "found on the third page", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			others(t, c, 250)
		}, lookup: lookupCharge(p), want: "APPROVED"},
		{name: "more than the pages it may read: unknown", pages: 1, prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			others(t, c, 120)
		}, lookup: lookupCharge(p), want: "unknown"},
		{name: "a lookup Stripe fails: unknown", prepare: func(_ *testing.T, f *stripefake.Server, _ *stripe.Client) {
			f.FailNext(stripefake.LookupFaults, stripefake.FaultLookup500)
		}, lookup: lookupCharge(p), want: "unknown"},
		{name: "authorization held", prepare: holdFor(a), lookup: lookupAuthorization(a), want: "APPROVED"},
		{name: "authorization voided since: approved still", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Void(t.Context(), voidOf(a)))
		}, lookup: lookupAuthorization(a), want: "APPROVED"},
		{name: "authorization lapsed since: approved still", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			lapse(t, f, a)
		}, lookup: lookupAuthorization(a), want: "APPROVED"},
		{name: "capture found", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			f.FailNext(captureKey(a, "cp"), stripefake.FaultDrop)
			_, _ = c.Capture(t.Context(), captureOf(t, a, "10.50", "cp"))
		}, lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupCapture(t.Context(), captureOf(t, a, "10.50", "cp"))
		}, want: "APPROVED"},
		{name: "capture not made", prepare: holdFor(a), lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupCapture(t.Context(), captureOf(t, a, "10.50", "cp"))
		}, want: "no charge"},
		{name: "another capture's", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Capture(t.Context(), captureOf(t, a, "10.50", "other")))
		}, lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupCapture(t.Context(), captureOf(t, a, "10.50", "cp"))
		}, want: "no charge"},
		{name: "void found", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			f.FailNext(voidOf(a).IdempotencyKey, stripefake.FaultDrop)
			_, _ = c.Void(t.Context(), voidOf(a))
		}, lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupVoid(t.Context(), voidOf(a))
		}, want: "APPROVED"},
		{name: "a lapse is not a void", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			lapse(t, f, a)
		}, lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupVoid(t.Context(), voidOf(a))
		}, want: "no charge"},
		{name: "refund found", prepare: func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
			f.FailNext(refundOf(t, p, "1.00", "re").IdempotencyKey, stripefake.FaultDrop)
			_, _ = c.Refund(t.Context(), refundOf(t, p, "1.00", "re"))
		}, lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupRefund(t.Context(), refundOf(t, p, "1.00", "re"))
		}, want: "APPROVED"},
		{name: "refund not made", prepare: func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			must(t)(c.Charge(t.Context(), chargeOf(p)))
		},
			lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
				return c.LookupRefund(t.Context(), refundOf(t, p, "1.00", "re"))
			}, want: "no charge"},
		{name: "refund of a PaymentIntent not found: unknown", lookup: func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
			return c.LookupRefund(t.Context(), refundOf(t, p, "1.00", "re"))
		}, want: "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, tc.cfg)
			// A lookup is bounded as a whole by Timeout; paging through a
			// few hundred records on a loaded machine can take seconds, and
			// the bound is not what these rows test.
			c, err := stripe.New(stripe.Config{SecretKey: secretKey, APIBase: f.URL, Timeout: 30 * time.Second, ConnectTimeout: time.Second, MaxLookupPages: tc.pages})
			if err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, f, c)
			}
			if got := outcome(tc.lookup(t, c)); got != tc.want {
				d, err := tc.lookup(t, c)
				t.Fatalf("lookup = %s, want %s (%s %v)", got, tc.want, d, err)
			}
		})
	}
}

func lookupCharge(p domain.Payment) func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
	return func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
		return c.LookupCharge(t.Context(), chargeOf(p))
	}
}

func lookupAuthorization(p domain.Payment) func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
	return func(t *testing.T, c *stripe.Client) (app.ProviderDecision, error) {
		return c.LookupAuthorization(t.Context(), chargeOf(p))
	}
}

func holdFor(a domain.Payment) func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
	return func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
		must(t)(c.Authorize(t.Context(), chargeOf(a)))
	}
}

// lapse ends a's hold as Stripe does when its capture window ends.
func lapse(t *testing.T, f *stripefake.Server, a domain.Payment) {
	t.Helper()
	pi, ok := f.PaymentIntentByMetadata("provider_key", a.Charge.ProviderIdempotencyKey())
	if !ok {
		t.Fatal("no hold to lapse")
	}
	if err := f.ExpireHold(pi.ID); err != nil {
		t.Fatal(err)
	}
}

// others charges n payments of other keys, all made after the one looked
// up.
func others(t *testing.T, c *stripe.Client, n int) {
	t.Helper()
	for i := range n {
		must(t)(c.Charge(t.Context(), chargeOf(payment(t, "pi_other_"+strconv.Itoa(i), stripefake.PMVisa))))
	}
}

// Where the hold of an authorization stands, as the expiry job asks.
func TestHold(t *testing.T) {
	t.Parallel()
	a := authorized(payment(t, "pa_hold", stripefake.PMVisa))
	tests := []struct {
		name    string
		prepare func(t *testing.T, f *stripefake.Server, c *stripe.Client)
		want    app.HoldStatus
		wantErr string
	}{
		{"active", holdFor(a), app.HoldActive, ""},
		{"captured", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Capture(t.Context(), captureOf(t, a, "10.50", "cp")))
		}, app.HoldCaptured, ""},
		{"voided", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			must(t)(c.Void(t.Context(), voidOf(a)))
		}, app.HoldVoided, ""},
		{"expired", func(t *testing.T, f *stripefake.Server, c *stripe.Client) {
			holdFor(a)(t, f, c)
			lapse(t, f, a)
		}, app.HoldExpired, ""},
		{"none", nil, "", "no charge"},
		{"declined: holds nothing", func(t *testing.T, _ *stripefake.Server, c *stripe.Client) {
			_, _ = c.Authorize(t.Context(), chargeOf(authorized(payment(t, "pa_hold", stripefake.PMDeclined))))
		}, "", "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, stripefake.Config{})
			c := client(t, f.URL)
			if tc.prepare != nil {
				tc.prepare(t, f, c)
			}
			h, err := c.Hold(t.Context(), chargeOf(a))
			if got := outcome("", err); h != tc.want || (err != nil && got != tc.wantErr) || (err == nil && tc.wantErr != "") {
				t.Fatalf("Hold = %q, %v; want %q, %s", h, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A modification names its PaymentIntent by id, which the service does not
// keep: the adapter lists around the payment's reservation, and asks
// Search for one made later. Search lags: until it has caught up, the
// modification is "not now", nothing sent, never "none exists".
func TestAModificationFindsAPaymentIntentMadeLater(t *testing.T) {
	t.Parallel()
	c0 := &clock{t: time.Now()}
	f := startFake(t, stripefake.Config{SearchLag: time.Minute, Now: c0.Now})
	c := client(t, f.URL)
	a := authorized(payment(t, "pa_late", stripefake.PMVisa))
	// The authorization's request landed an hour after its reservation (a
	// retry long after a request that never arrived).
	c0.Advance(time.Hour)
	late := a
	late.CreatedAt = c0.Now()
	must(t)(c.Authorize(t.Context(), chargeOf(late)))
	if got := outcome(c.Capture(t.Context(), captureOf(t, a, "10.50", "cp"))); got != "not charged" {
		t.Fatalf("a capture before Search caught up = %s, want not charged", got)
	}
	if n := f.Received(stripe.IdempotencyKey(captureKey(a, "cp"))); n != 0 {
		t.Fatalf("%d captures were sent for a PaymentIntent not found", n)
	}
	c0.Advance(time.Minute)
	if got := outcome(c.Capture(t.Context(), captureOf(t, a, "10.50", "cp"))); got != "APPROVED" {
		t.Fatalf("a capture after Search caught up = %s, want approved", got)
	}
}

// clock is a fake's clock that a test moves.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// Amounts go to Stripe in each currency's minor units: cents, none for a
// zero-decimal currency, three digits for KWD; one that cannot be written
// so is refused before anything is sent.
func TestMinorUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount, currency string
		want             int64 // 0: refused
	}{
		{"10.50", "EUR", 1050},
		{"0.01", "USD", 1},
		{"500", "JPY", 500},
		{"1.5", "KWD", 1500},
		{"10.505", "EUR", 0},
		{"500.5", "JPY", 0},
		{"1.0005", "KWD", 0},
	}
	f := startFake(t, stripefake.Config{})
	c := client(t, f.URL)
	for i, tc := range tests {
		t.Run(tc.amount+" "+tc.currency, func(t *testing.T) {
			p := payment(t, "pi_units_"+strconv.Itoa(i), stripefake.PMVisa)
			p.Charge.Amount = money(t, tc.amount, tc.currency)
			got := outcome(c.Charge(t.Context(), chargeOf(p)))
			pi, made := f.PaymentIntentByMetadata("provider_key", p.Charge.ProviderIdempotencyKey())
			switch {
			case tc.want == 0 && (got != "refused" || made):
				t.Fatalf("outcome %s, made %v: want refused, nothing sent", got, made)
			case tc.want != 0 && (got != "APPROVED" || pi.Amount != tc.want || pi.Currency != strings.ToLower(tc.currency)):
				t.Fatalf("outcome %s, sent %d %s: want %d %s", got, pi.Amount, pi.Currency, tc.want, strings.ToLower(tc.currency))
			}
		})
	}
}

// A provider key longer than Stripe's 255 characters goes as a hash of
// it, the same on every retry, so the retry is a replay; the metadata
// keeps the key whole.
func TestALongKeyIsHashedTheSameEveryTime(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 300)
	if h := stripe.IdempotencyKey(long); len(h) > stripe.MaxKeyLength || h != stripe.IdempotencyKey(long) || h == stripe.IdempotencyKey(long+"x") {
		t.Fatalf("IdempotencyKey(300 characters) = %q", h)
	}
	if k := strings.Repeat("k", 255); stripe.IdempotencyKey(k) != k {
		t.Fatal("a key of 255 characters is not sent as it is")
	}
	f := startFake(t, stripefake.Config{})
	c := client(t, f.URL)
	// The longest external payment id and capture reference: a key of 272
	// characters.
	a := authorized(payment(t, "pa_"+strings.Repeat("l", domain.MaxExternalPaymentIDLength-3), stripefake.PMVisa))
	must(t)(c.Authorize(t.Context(), chargeOf(a)))
	capture := captureOf(t, a, "10.50", strings.Repeat("r", 128))
	if len(capture.IdempotencyKey) <= stripe.MaxKeyLength {
		t.Fatalf("the capture's key has %d characters: not long enough to test", len(capture.IdempotencyKey))
	}
	f.FailNext(stripe.IdempotencyKey(capture.IdempotencyKey), stripefake.FaultDrop)
	if got := outcome(c.Capture(t.Context(), capture)); got != "unknown" {
		t.Fatalf("first capture = %s", got)
	}
	if got := outcome(c.Capture(t.Context(), capture)); got != "APPROVED" {
		t.Fatalf("retried capture = %s", got)
	}
	key := stripe.IdempotencyKey(capture.IdempotencyKey)
	if f.Received(key) != 2 || f.Executed(key) != 1 {
		t.Fatalf("under the hashed key: received %d, executed %d; want 2 and 1", f.Received(key), f.Executed(key))
	}
	if got := outcome(c.LookupCapture(t.Context(), capture)); got != "APPROVED" {
		t.Fatalf("lookup by the whole key = %s", got)
	}
}
