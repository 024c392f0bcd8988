package sandbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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

// Every way the real sandbox provider answers, over a real connection, and
// the case of the port it falls in.
func TestChargeSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	provider, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{SlowDelay: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close() })
	c := client(t, provider.URL)

	tests := []struct {
		external    string
		want        string
		wantCharged bool // at the provider, after the call
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
	for _, tc := range tests {
		t.Run(tc.external, func(t *testing.T) {
			req := charge(t, tc.external)
			if got := outcome(c.Charge(context.Background(), req)); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
			if n := len(provider.Ledger().Succeeded(tc.external)); n != btoi(tc.wantCharged) {
				t.Fatalf("succeeded charges at the provider = %d, want %v", n, tc.wantCharged)
			}
		})
	}

	// The same provider key with other parameters is refused before any
	// charge, for good.
	other := charge(t, "pi_ok")
	other.Charge.Amount, _ = domain.NewMoney(decimal.RequireFromString("99"), "RUB")
	if got := outcome(c.Charge(context.Background(), other)); got != "refused" {
		t.Fatalf("key reused with another amount: %s, want refused", got)
	}
}

// The lookup by key, against the real sandbox provider: the charge's
// decision, the provider's own "no charge", and "cannot tell" while the
// key's first request is still being processed (it may yet charge).
func TestLookupChargeSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	provider, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{Latency: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close() })
	c := client(t, provider.URL)
	ctx := context.Background()

	approved, declined, refused, processing := charge(t, "pi_ok"), charge(t, "decline_x"), charge(t, "refuse_x"), charge(t, "pi_slow")
	for _, req := range []app.ProviderCharge{approved, declined, refused} {
		_, _ = c.Charge(ctx, req) // the client's timeout is shorter than the latency; the provider goes on
	}
	waitUntil := func(cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal("the provider did not get there within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitUntil(func() bool {
		_, okA := provider.Lookup(approved.IdempotencyKey)
		_, okD := provider.Lookup(declined.IdempotencyKey)
		return okA && okD
	})
	// The last request is in the provider's hands for a second: long
	// enough to be looked up while it is.
	go func() { _, _ = c.Charge(ctx, processing) }()
	waitUntil(func() bool { return provider.Ledger().Counters.Requests == 4 })
	tests := []struct {
		key  string
		want string
	}{
		{approved.IdempotencyKey, string(app.ProviderApproved)},
		{declined.IdempotencyKey, string(app.ProviderDeclined)},
		{refused.IdempotencyKey, "no charge"},
		{"never-used", "no charge"},
		{processing.IdempotencyKey, "unknown"},
	}
	for _, tc := range tests {
		if got := outcome(c.LookupCharge(ctx, tc.key)); got != tc.want {
			t.Fatalf("lookup %s = %s, want %s", tc.key, got, tc.want)
		}
	}
}

// A lookup answered by something other than the provider's own record
// cannot say "no charge": only the provider's charge_not_found can.
func TestLookupAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"404 from a proxy", 404, `<html>Not Found</html>`, "unknown"},
		{"404 of another kind", 404, `{"error":{"type":"not_found"}}`, "unknown"},
		{"404 the provider's", 404, `{"error":{"type":"charge_not_found"}}`, "no charge"},
		{"200 for another key", 200, `{"id":"ch_1","idempotencyKey":"other","status":"succeeded"}`, "unknown"},
		{"200 the key's", 200, `{"id":"ch_1","idempotencyKey":"k","status":"declined"}`, string(app.ProviderDeclined)},
		{"502 gateway page", 502, `<html>Bad Gateway</html>`, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := outcome(answeredBy(t, tc.status, tc.body).LookupCharge(context.Background(), "k")); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
		})
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
	provider, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close() })
	proxy, err := faultproxy.New("tcp", provider.URL[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	c := client(t, "http://"+proxy.Addr())

	tests := []struct {
		mode        faultproxy.Mode
		want        string
		wantCharged bool
	}{
		{faultproxy.Refuse, "not charged", false},   // connection refused: nothing sent
		{faultproxy.Blackhole, "unknown", false},    // sent, never answered
		{faultproxy.LoseResponses, "unknown", true}, // processed, answer lost
		{faultproxy.Pass, string(app.ProviderApproved), true},
	}
	for i, tc := range tests {
		t.Run(tc.mode.String(), func(t *testing.T) {
			if err := proxy.SetMode(tc.mode); err != nil {
				t.Fatal(err)
			}
			external := "pi_net_" + string(rune('a'+i))
			if got := outcome(c.Charge(context.Background(), charge(t, external))); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
			if n := len(provider.Ledger().Succeeded(external)); n != btoi(tc.wantCharged) {
				t.Fatalf("succeeded charges = %d, want %v", n, tc.wantCharged)
			}
		})
	}
}

// net/http resends a POST with an Idempotency-Key header by itself when a
// reused keep-alive connection breaks; the adapter must not, or a lost
// answer would be hidden from the use case behind a second request.
func TestNoHiddenResendOnAReusedConnection(t *testing.T) {
	t.Parallel()
	provider, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provider.Close() })
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

// Answers that are not the provider's: a 200 describing another charge, a
// 200 that is not JSON, rate limiting, a 5xx that says nothing.
func TestAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"200 for another amount", 200, `{"id":"ch_1","status":"succeeded","amount":"99","currency":"RUB","reference":"pi_1"}`, "unknown"},
		{"200 not JSON", 200, `<html>ok</html>`, "unknown"},
		{"200 unknown status", 200, `{"id":"ch_1","status":"pending","amount":"10.50","currency":"RUB","reference":"pi_1"}`, "unknown"},
		{"400", 400, `{"error":{"type":"invalid_request"}}`, "refused"},
		{"401", 401, `{"error":{"type":"unauthorized"}}`, "not charged"},
		{"403", 403, `{"error":{"type":"forbidden"}}`, "not charged"},
		{"404", 404, `<html>Not Found</html>`, "not charged"},
		{"422", 422, `{"error":{"type":"invalid_request","charged":false}}`, "refused"},
		{"429", 429, `{"error":{"type":"rate_limited"}}`, "not charged"},
		{"500 without a word", 500, `{"error":{"type":"api_error"}}`, "unknown"},
		{"503 charged false", 503, `{"error":{"type":"api_unavailable","charged":false}}`, "not charged"},
		{"504 gateway page", 504, `<html>Gateway Timeout</html>`, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := outcome(answeredBy(t, tc.status, tc.body).Charge(context.Background(), charge(t, "pi_1"))); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
		})
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
