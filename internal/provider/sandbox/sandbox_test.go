package sandbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

func charge(t *testing.T, external string) app.ProviderCharge {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString("10.50"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(1, 1, m, sandbox.Name, domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return app.ProviderCharge{IdempotencyKey: c.ProviderIdempotencyKey(), Charge: c}
}

// refunded is the payment whose charge the refunds of the tests refund:
// 1000.00 RUB under the reference pi_refunded (prepare charges it).
func refunded(t *testing.T) domain.Payment {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString("1000.00"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(1, 1, m, sandbox.Name, "pi_refunded")
	if err != nil {
		t.Fatal(err)
	}
	return domain.Payment{ID: 1, ClientID: "c", Charge: c, Status: domain.PaymentSucceeded}
}

func refund(t *testing.T, external string) app.ProviderRefund {
	t.Helper()
	p := refunded(t)
	m, err := domain.NewMoney(decimal.RequireFromString("10.50"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	r, err := domain.NewRefund(p, m, domain.ExternalRefundID(external))
	if err != nil {
		t.Fatal(err)
	}
	return app.ProviderRefund{IdempotencyKey: r.ProviderIdempotencyKey(), ChargeKey: p.Charge.ProviderIdempotencyKey(), Refund: r}
}

// opKind is one of the adapter's calls, for the tests that hold for all:
// every answer of the provider sorts into the same four cases.
type opKind struct {
	name string
	// prepare, when set, makes at provider what create needs (the
	// authorization a capture takes), over a connection of its own.
	prepare func(t *testing.T, provider *sandboxprovider.Server, external string)
	// create charges (refunds, ...) 10.50 under the reference external.
	create func(t *testing.T, c *sandbox.Client, external string) (app.ProviderDecision, error)
	// key is the provider key create uses for external.
	key    func(t *testing.T, external string) string
	lookup func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error)
	// made counts what succeeded at the provider under the reference.
	made func(p *sandboxprovider.Server, external string) int
	// flag and notFound are the words of the kind's error answers.
	flag, notFound string
}

var opKinds = []opKind{
	{name: "charge", flag: "charged", notFound: "charge_not_found", lookup: func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error) {
		return c.LookupCharge(ctx, app.ProviderCharge{IdempotencyKey: key})
	},
		create: func(t *testing.T, c *sandbox.Client, ext string) (app.ProviderDecision, error) {
			return c.Charge(t.Context(), charge(t, ext))
		},
		key:  func(t *testing.T, ext string) string { return charge(t, ext).IdempotencyKey },
		made: func(p *sandboxprovider.Server, ext string) int { return len(p.Ledger().Succeeded(ext)) }},
	{name: "refund", flag: "refunded", notFound: "refund_not_found", lookup: func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error) {
		return c.LookupRefund(ctx, app.ProviderRefund{IdempotencyKey: key})
	},
		create: func(t *testing.T, c *sandbox.Client, ext string) (app.ProviderDecision, error) {
			return c.Refund(t.Context(), refund(t, ext))
		},
		key:  func(t *testing.T, ext string) string { return refund(t, ext).IdempotencyKey },
		made: func(p *sandboxprovider.Server, ext string) int { return len(p.Ledger().SucceededRefunds(ext)) }},
	{name: "authorization", flag: "authorized", notFound: "authorization_not_found", lookup: func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error) {
		return c.LookupAuthorization(ctx, app.ProviderCharge{IdempotencyKey: key})
	},
		create: func(t *testing.T, c *sandbox.Client, ext string) (app.ProviderDecision, error) {
			return c.Authorize(t.Context(), authorization(t, ext))
		},
		key:  func(_ *testing.T, ext string) string { return authKey(ext) },
		made: func(p *sandboxprovider.Server, ext string) int { return len(p.Ledger().SucceededAuthorizations(ext)) }},
	{name: "capture", flag: "captured", notFound: "capture_not_found", lookup: func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error) {
		return c.LookupCapture(ctx, app.ProviderCapture{IdempotencyKey: key})
	},
		// The capture of external takes 10.50 of 1000.00 held under the
		// reference pa_<external>.
		prepare: func(t *testing.T, p *sandboxprovider.Server, ext string) { hold(t, p, "pa_"+ext, "1000.00") },
		create: func(t *testing.T, c *sandbox.Client, ext string) (app.ProviderDecision, error) {
			return c.Capture(t.Context(), capture(t, ext))
		},
		key:  func(_ *testing.T, ext string) string { return "capture:" + ext },
		made: func(p *sandboxprovider.Server, ext string) int { return len(p.Ledger().SucceededCaptures(ext)) }},
}

// voidKind is the void, for the tests its call fits: it sends no
// reference, so it meets the faults of its authorization's, which prepare
// makes under the reference external (a fault that never lets the
// authorization be made, or a decline, cannot reach the void).
var voidKind = opKind{name: "void", flag: "voided", notFound: "void_not_found", lookup: func(c *sandbox.Client, ctx context.Context, key string) (app.ProviderDecision, error) {
	return c.LookupVoid(ctx, app.ProviderVoid{IdempotencyKey: key})
},
	prepare: func(t *testing.T, p *sandboxprovider.Server, ext string) { hold(t, p, ext, "10.50") },
	create: func(t *testing.T, c *sandbox.Client, ext string) (app.ProviderDecision, error) {
		return c.Void(t.Context(), voidOf(ext))
	},
	key: func(_ *testing.T, ext string) string { return "void:" + ext },
	made: func(p *sandboxprovider.Server, ext string) int {
		_, ok := p.LookupVoid("void:" + ext)
		return btoi(ok)
	}}

// authKey is the provider key of the authorization made for external.
func authKey(external string) string { return "authorization:" + external }

// authorization is the authorization of 10.50 RUB for external.
func authorization(t *testing.T, external string) app.ProviderCharge {
	t.Helper()
	c := charge(t, external)
	c.IdempotencyKey = authKey(external)
	return c
}

// capture is the capture of 10.50 RUB under the reference external of the
// authorization made for pa_<external>.
func capture(t *testing.T, external string) app.ProviderCapture {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString("10.50"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	return app.ProviderCapture{IdempotencyKey: "capture:" + external, AuthorizationKey: authKey("pa_" + external), Amount: m, Reference: external}
}

// voidOf is the void of the authorization made for external.
func voidOf(external string) app.ProviderVoid {
	return app.ProviderVoid{IdempotencyKey: "void:" + external, AuthorizationKey: authKey(external)}
}

// hold authorizes amount RUB for external at provider, asking again until
// the provider holds it (a fault of its reference may lose or refuse the
// first request), over a connection of its own.
func hold(t *testing.T, provider *sandboxprovider.Server, external, amount string) {
	t.Helper()
	c := client(t, provider.URL)
	req := authorization(t, external)
	m, err := domain.NewMoney(decimal.RequireFromString(amount), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	req.Charge.Amount = m
	waitUntil(t, func() bool {
		if a, ok := provider.LookupAuthorization(req.IdempotencyKey); ok {
			return a.Status == sandboxprovider.StatusSucceeded
		}
		_, _ = c.Authorize(context.Background(), req)
		return false
	})
}

// prepare charges the payment the refunds refund, at provider, and waits
// until it is made (a provider with latency outlasts the client's timeout).
func prepare(t *testing.T, provider *sandboxprovider.Server) {
	t.Helper()
	p := refunded(t)
	_, _ = client(t, provider.URL).Charge(context.Background(), app.ProviderCharge{IdempotencyKey: p.Charge.ProviderIdempotencyKey(), Charge: p.Charge})
	waitUntil(t, func() bool { _, ok := provider.Lookup(p.Charge.ProviderIdempotencyKey()); return ok })
}

// expect makes k's call for external through c, and checks the port's
// case it falls in and whether the provider made it.
func expect(t *testing.T, k opKind, c *sandbox.Client, provider *sandboxprovider.Server, external, want string, wantMade bool) {
	t.Helper()
	if k.prepare != nil {
		k.prepare(t, provider, external)
	}
	if got := outcome(k.create(t, c, external)); got != want {
		t.Fatalf("outcome = %s, want %s", got, want)
	}
	if n := k.made(provider, external); n != btoi(wantMade) {
		t.Fatalf("succeeded at the provider = %d, want %v", n, wantMade)
	}
}

func client(t *testing.T, baseURL string) *sandbox.Client {
	t.Helper()
	c, err := sandbox.New(sandbox.Config{BaseURL: baseURL, ConnectTimeout: time.Second, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
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

// Every way the real sandbox provider answers a charge, over a real
// connection, and the case of the port it falls in.
func TestChargeSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	sortsEveryAnswer(t, opKinds[0])
}

// The same for a refund: the same answers fall in the same cases.
func TestRefundSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	sortsEveryAnswer(t, opKinds[1])
}

// The same for an authorization.
func TestAuthorizeSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	sortsEveryAnswer(t, opKinds[2])
}

// The same for a capture, by its own reference.
func TestCaptureSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	sortsEveryAnswer(t, opKinds[3])
}

// sortsEveryAnswer makes k's call meet every answer of the sandbox.
func sortsEveryAnswer(t *testing.T, k opKind) {
	tests := []struct {
		external string
		want     string
		wantMade bool // at the provider, after the call
	}{
		{"pi_ok", string(app.ProviderApproved), true},
		{"decline_card", string(app.ProviderDeclined), false},
		{"fail_down", "not charged", false},
		{"drop_answer", "unknown", true},
		{"gw502_answer", "unknown", true},
		{"slow_answer", "unknown", true},
		{"busy_key", "unknown", false},
		{"refuse_invalid", "refused", false},
	}
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{SlowDelay: 3 * time.Second})
	prepare(t, provider)
	c := client(t, provider.URL)
	for _, tc := range tests {
		t.Run(tc.external, func(t *testing.T) {
			expect(t, k, c, provider, tc.external, tc.want, tc.wantMade)
		})
	}
}

// The same provider key with other parameters is refused before anything
// is done, for good; so is a refund beyond what its charge has left, and a
// capture or void the hold no longer allows.
func TestOtherParametersUnderAKeyAreRefused(t *testing.T) {
	t.Parallel()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{})
	prepare(t, provider)
	c := client(t, provider.URL)
	ctx := context.Background()
	ninetyNine, _ := domain.NewMoney(decimal.RequireFromString("99"), "RUB")
	tooMuch, _ := domain.NewMoney(decimal.RequireFromString("990.00"), "RUB") // 10.50 of 1000.00 is refunded first

	otherCharge := charge(t, "pi_ok")
	otherCharge.Charge.Amount = ninetyNine
	otherRefund := refund(t, "re_ok")
	otherRefund.Refund.Amount = ninetyNine
	beyond := refund(t, "re_beyond")
	beyond.Refund.Amount = tooMuch
	otherAuthorization := authorization(t, "pa_ok")
	otherAuthorization.Charge.Amount = ninetyNine
	hold(t, provider, "pa_cp_ok", "1000.00")
	otherCapture := capture(t, "cp_ok")
	otherCapture.Amount = ninetyNine
	secondCapture := capture(t, "cp_ok")
	secondCapture.IdempotencyKey = "capture:cp_second"
	hold(t, provider, "pa_cp_small", "10.50")
	aboveTheHold := capture(t, "cp_small")
	aboveTheHold.Amount = ninetyNine
	approved := func() (app.ProviderDecision, error) { return app.ProviderApproved, nil }
	tests := []struct {
		name  string
		first func() (app.ProviderDecision, error)
		then  func() (app.ProviderDecision, error)
	}{
		{"charge", func() (app.ProviderDecision, error) { return c.Charge(ctx, charge(t, "pi_ok")) },
			func() (app.ProviderDecision, error) { return c.Charge(ctx, otherCharge) }},
		{"refund", func() (app.ProviderDecision, error) { return c.Refund(ctx, refund(t, "re_ok")) },
			func() (app.ProviderDecision, error) { return c.Refund(ctx, otherRefund) }},
		{"refund beyond the charge", approved,
			func() (app.ProviderDecision, error) { return c.Refund(ctx, beyond) }},
		{"authorization", func() (app.ProviderDecision, error) { return c.Authorize(ctx, authorization(t, "pa_ok")) },
			func() (app.ProviderDecision, error) { return c.Authorize(ctx, otherAuthorization) }},
		{"capture", func() (app.ProviderDecision, error) { return c.Capture(ctx, capture(t, "cp_ok")) },
			func() (app.ProviderDecision, error) { return c.Capture(ctx, otherCapture) }},
		{"a second capture of the hold", approved,
			func() (app.ProviderDecision, error) { return c.Capture(ctx, secondCapture) }},
		{"a capture above the hold", approved,
			func() (app.ProviderDecision, error) { return c.Capture(ctx, aboveTheHold) }},
		{"a void of the captured hold", approved,
			func() (app.ProviderDecision, error) { return c.Void(ctx, voidOf("pa_cp_ok")) }},
	}
	for _, tc := range tests {
		if got := outcome(tc.first()); got != string(app.ProviderApproved) {
			t.Fatalf("%s: first = %s", tc.name, got)
		}
		if got := outcome(tc.then()); got != "refused" {
			t.Fatalf("%s: %s, want refused", tc.name, got)
		}
	}
}

// The lookup by key of a charge, against the real sandbox provider: the
// decision, the provider's own "no charge", and "cannot tell" while the
// key's first request is still being processed (it may yet charge).
func TestLookupChargeSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	lookupSortsEveryAnswer(t, opKinds[0])
}

// The same for the lookup of a refund.
func TestLookupRefundSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	lookupSortsEveryAnswer(t, opKinds[1])
}

// The same for the lookup of an authorization.
func TestLookupAuthorizationSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	lookupSortsEveryAnswer(t, opKinds[2])
}

// The same for the lookup of a capture.
func TestLookupCaptureSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	lookupSortsEveryAnswer(t, opKinds[3])
}

// lookupSortsEveryAnswer looks up keys of k in every state.
func lookupSortsEveryAnswer(t *testing.T, k opKind) {
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{Latency: time.Second})
	prepare(t, provider)
	c := client(t, provider.URL)

	for _, external := range []string{"pi_ok", "decline_x", "refuse_x", "pi_slow"} {
		if k.prepare != nil {
			k.prepare(t, provider, external)
		}
	}
	for _, external := range []string{"pi_ok", "decline_x", "refuse_x"} {
		_, _ = k.create(t, c, external) // the client's timeout is shorter than the latency; the provider goes on
	}
	waitUntil(t, func() bool {
		_, okA := k.lookup(c, context.Background(), k.key(t, "pi_ok"))
		_, okD := k.lookup(c, context.Background(), k.key(t, "decline_x"))
		return okA == nil && okD == nil
	})
	// The last request is in the provider's hands for a second: long
	// enough to be looked up while it is.
	go func() { _, _ = k.create(t, c, "pi_slow") }()
	waitUntil(t, func() bool { return outcome(k.lookup(c, context.Background(), k.key(t, "pi_slow"))) == "unknown" })
	tests := []struct {
		key  string
		want string
	}{
		{k.key(t, "pi_ok"), string(app.ProviderApproved)},
		{k.key(t, "decline_x"), string(app.ProviderDeclined)},
		{k.key(t, "refuse_x"), "no charge"},
		{"never-used", "no charge"},
		{k.key(t, "pi_slow"), "unknown"},
	}
	for _, tc := range tests {
		if got := outcome(k.lookup(c, context.Background(), tc.key)); got != tc.want {
			t.Fatalf("lookup %s = %s, want %s", tc.key, got, tc.want)
		}
	}
}

// waitUntil polls cond every 10 ms, 1,000 times at most.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for polls := 0; !cond(); polls++ {
		if polls == 1000 {
			t.Fatal("the provider did not get there within 1,000 polls")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lookup answered by something other than the provider's own record
// cannot say "nothing under the key": only the provider's charge_not_found
// (refund_not_found) can.
func TestLookupAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string // NOT_FOUND stands for the kind's not-found type
		want   string
	}{
		{"404 from a proxy", 404, `<html>Not Found</html>`, "unknown"},
		{"404 of another kind", 404, `{"error":{"type":"not_found"}}`, "unknown"},
		{"404 the provider's", 404, `{"error":{"type":"NOT_FOUND"}}`, "no charge"},
		{"200 for another key", 200, `{"id":"x_1","idempotencyKey":"other","status":"succeeded"}`, "unknown"},
		{"200 the key's", 200, `{"id":"x_1","idempotencyKey":"k","status":"declined"}`, string(app.ProviderDeclined)},
		{"502 gateway page", 502, `<html>Bad Gateway</html>`, "unknown"},
	}
	for _, k := range opKinds {
		for _, tc := range tests {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				c := answeredBy(t, tc.status, strings.ReplaceAll(tc.body, "NOT_FOUND", k.notFound))
				if got := outcome(k.lookup(c, context.Background(), "k")); got != tc.want {
					t.Fatalf("outcome = %s, want %s", got, tc.want)
				}
			})
		}
	}
	// The other kind's not-found is not this kind's.
	if got := outcome(answeredBy(t, 404, `{"error":{"type":"charge_not_found"}}`).LookupRefund(context.Background(), app.ProviderRefund{IdempotencyKey: "k"})); got != "unknown" {
		t.Fatalf("a refund lookup answered charge_not_found: %s, want unknown", got)
	}
}

// answeredBy is a client of a server that answers every request with
// status and body, as something other than the provider might.
func answeredBy(t *testing.T, status int, body string) *sandbox.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return client(t, srv.URL)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Failures of the network itself: a request that never left is "not
// charged"; one that left and got no answer is "unknown".
func TestNetworkFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode     faultproxy.Mode
		want     string
		wantMade bool
	}{
		{faultproxy.Refuse, "not charged", false},   // connection refused: nothing sent
		{faultproxy.Blackhole, "unknown", false},    // sent, never answered
		{faultproxy.LoseResponses, "unknown", true}, // processed, answer lost
		{faultproxy.Pass, string(app.ProviderApproved), true},
	}
	for _, k := range append(opKinds, voidKind) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{})
			prepare(t, provider)
			proxy, err := faultproxy.New("tcp", provider.URL[len("http://"):])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			c := client(t, "http://"+proxy.Addr())
			for i, tc := range tests {
				t.Run(tc.mode.String(), func(t *testing.T) {
					if err := proxy.SetMode(tc.mode); err != nil {
						t.Fatal(err)
					}
					expect(t, k, c, provider, "pi_net_"+string(rune('a'+i)), tc.want, tc.wantMade)
				})
			}
		})
	}
}

// net/http resends a POST with an Idempotency-Key header by itself when a
// reused keep-alive connection breaks; the adapter must not, or a lost
// answer would be hidden from the use case behind a second request.
func TestNoHiddenResendOnAReusedConnection(t *testing.T) {
	t.Parallel()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{})
	c := client(t, provider.URL)

	// The first call leaves a keep-alive connection in the pool; the drop_
	// call goes out on it and the provider drops it after charging.
	if _, err := c.Charge(context.Background(), charge(t, "pi_warm")); err != nil {
		t.Fatal(err)
	}
	if got := outcome(c.Charge(context.Background(), charge(t, "drop_reused"))); got != "unknown" {
		t.Fatalf("outcome = %s, want unknown: the answer was lost", got)
	}
	charged := provider.Ledger().Succeeded("drop_reused")
	if len(charged) != 1 || charged[0].Requests != 1 {
		t.Fatalf("provider saw %+v, want one charge from exactly one request", charged)
	}
}

// Answers that are not the provider's: a 200 describing another charge
// (refund), a 200 that is not JSON, rate limiting, a 5xx that says nothing.
func TestAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	// FLAG stands for the kind's "charged", "refunded", ...; CHARGE for the
	// "charge" field a refund's answer carries, or the "authorization" a
	// capture's does.
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"200 the request's", 200, `{"id":"x_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`, string(app.ProviderApproved)},
		{"200 for another amount", 200, `{"id":"x_1","status":"succeeded","amount":"99","currency":"RUB","reference":"pi_1"CHARGE}`, "unknown"},
		{"200 for another reference", 200, `{"id":"x_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_2"CHARGE}`, "unknown"},
		{"200 not JSON", 200, `<html>ok</html>`, "unknown"},
		{"200 unknown status", 200, `{"id":"x_1","status":"pending","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`, "unknown"},
		{"400", 400, `{"error":{"type":"invalid_request"}}`, "refused"},
		{"401", 401, `{"error":{"type":"unauthorized"}}`, "not charged"},
		{"403", 403, `{"error":{"type":"forbidden"}}`, "not charged"},
		{"404", 404, `<html>Not Found</html>`, "not charged"},
		{"422", 422, `{"error":{"type":"invalid_request","FLAG":false}}`, "refused"},
		{"429", 429, `{"error":{"type":"rate_limited"}}`, "not charged"},
		{"500 without a word", 500, `{"error":{"type":"api_error"}}`, "unknown"},
		{"503 nothing done", 503, `{"error":{"type":"api_unavailable","FLAG":false}}`, "not charged"},
		{"504 gateway page", 504, `<html>Gateway Timeout</html>`, "unknown"},
	}
	charges := map[string]string{"charge": "", "refund": `,"charge":"` + refund(t, "pi_1").ChargeKey + `"`,
		"authorization": "", "capture": `,"authorization":"` + capture(t, "pi_1").AuthorizationKey + `"`}
	for _, k := range opKinds {
		for _, tc := range tests {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				body := strings.NewReplacer("FLAG", k.flag, "CHARGE", charges[k.name]).Replace(tc.body)
				if got := outcome(k.create(t, answeredBy(t, tc.status, body), "pi_1")); got != tc.want {
					t.Fatalf("outcome = %s, want %s", got, tc.want)
				}
			})
		}
	}
	// A refund's answer for another charge, and a 503 that speaks of the
	// other kind, say nothing of this refund.
	for _, body := range []string{
		`{"id":"x_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_1","charge":"sandbox:other"}`,
		`{"error":{"type":"api_unavailable","charged":false}}`,
	} {
		status := map[bool]int{true: 200, false: 503}[strings.HasPrefix(body, `{"id"`)]
		if got := outcome(answeredBy(t, status, body).Refund(context.Background(), refund(t, "pi_1"))); got != "unknown" {
			t.Fatalf("refund answered %d %s: %s, want unknown", status, body, got)
		}
	}
}

func TestNewRejectsABadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8081", "ftp://x", "http://"} {
		if _, err := sandbox.New(sandbox.Config{BaseURL: u}); err == nil {
			t.Errorf("New(%q) accepted it", u)
		}
	}
}
