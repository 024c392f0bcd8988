package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// clock is a provider's clock that a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Every way the real sandbox provider answers a void, over a real
// connection, and the case of the port it falls in. The void sends no
// reference, so it meets the faults of its authorization's (those that let
// the authorization be made); and the hold's state refuses it for good.
func TestVoidSortsEveryAnswerIntoThePortsCases(t *testing.T) {
	t.Parallel()
	clk := newClock()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{SlowDelay: 3 * time.Second, Now: clk.Now, AuthorizationTTL: time.Hour, HoldSweep: -1})
	c := client(t, provider.URL)
	ctx := context.Background()
	tests := []struct {
		external string
		before   func(t *testing.T) // after the authorization, before the void
		want     string
		wantMade bool
	}{
		{"pi_ok", nil, string(app.ProviderApproved), true},
		{"drop_answer", nil, "unknown", true},
		{"gw502_answer", nil, "unknown", true},
		{"slow_answer", nil, "unknown", true},
		{"busy_key", nil, "unknown", false},
		{"refuseonce_invalid", nil, "refused", false},
		{"droprefuse_answer", nil, "unknown", true},
		{"pi_captured", func(t *testing.T) {
			req := capture(t, "x")
			req.AuthorizationKey = authKey("pi_captured")
			if got := outcome(c.Capture(ctx, req)); got != string(app.ProviderApproved) {
				t.Fatalf("the capture: %s", got)
			}
		}, "refused", false},
		{"pi_voided", func(t *testing.T) {
			req := voidOf("pi_voided")
			req.IdempotencyKey = "void:first"
			if got := outcome(c.Void(ctx, req)); got != string(app.ProviderApproved) {
				t.Fatalf("the first void: %s", got)
			}
		}, "refused", false},
		{"pi_lapsed", func(*testing.T) { clk.advance(time.Hour) }, "refused", false},
	}
	for _, tc := range tests {
		t.Run(tc.external, func(t *testing.T) {
			hold(t, provider, tc.external, "10.50")
			if tc.before != nil {
				tc.before(t)
			}
			if got := outcome(c.Void(ctx, voidOf(tc.external))); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
			if _, made := provider.LookupVoid("void:" + tc.external); made != tc.wantMade {
				t.Fatalf("voided at the provider = %v, want %v", made, tc.wantMade)
			}
		})
	}
	if got := outcome(c.Void(ctx, voidOf("pi_never"))); got != "refused" {
		t.Fatalf("a void of no authorization: %s, want refused", got)
	}
}

// The lookup of a void: the decision, the provider's own "no void" (none
// sent, or refused), and "cannot tell" while it is being processed.
func TestLookupVoidSortsEveryAnswer(t *testing.T) {
	t.Parallel()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{Latency: time.Second})
	c := client(t, provider.URL)
	ctx := context.Background()
	for _, ext := range []string{"pi_ok", "pi_slow"} {
		hold(t, provider, ext, "10.50")
	}
	_, _ = c.Void(ctx, voidOf("pi_ok")) // the client's timeout is shorter than the latency; the provider goes on
	waitUntil(t, func() bool { _, ok := provider.LookupVoid("void:pi_ok"); return ok })
	_, _ = c.Void(ctx, voidOf("pi_refused")) // no authorization: refused once processed, nothing recorded
	waitUntil(t, func() bool { return provider.VoidCounters().Refusals == 1 })
	go func() { _, _ = c.Void(ctx, voidOf("pi_slow")) }()
	waitUntil(t, func() bool {
		return outcome(c.LookupVoid(ctx, app.ProviderVoid{IdempotencyKey: "void:pi_slow"})) == "unknown"
	})
	tests := []struct {
		key, want string
	}{
		{"void:pi_ok", string(app.ProviderApproved)},
		{"void:pi_refused", "no charge"},
		{"never-used", "no charge"},
		{"void:pi_slow", "unknown"},
	}
	for _, tc := range tests {
		if got := outcome(c.LookupVoid(ctx, app.ProviderVoid{IdempotencyKey: tc.key})); got != tc.want {
			t.Fatalf("lookup %s = %s, want %s", tc.key, got, tc.want)
		}
	}
}

// holdOutcome names the case a Hold answer falls in: the state, "no
// charge", or "unknown" (AnswerOf's, for any other error).
func holdOutcome(t *testing.T) func(app.HoldStatus, error) string {
	return func(h app.HoldStatus, err error) string {
		t.Helper()
		switch {
		case err == nil:
			return string(h)
		case errors.Is(err, app.ErrNoProviderCharge):
			return "no charge"
		case app.AnswerOf("", err) == app.AnswerUnknown:
			return "unknown"
		default:
			t.Fatalf("Hold's error %v is a refusal: a lookup refuses nothing", err)
			return ""
		}
	}
}

// Hold maps every state of the provider's hold, against the real sandbox
// provider with a clock the test moves: active, captured, voided, expired
// once the provider's time for it passed, none under the key; a declined
// authorization holds nothing, which no state says: unknown.
func TestHoldSortsEveryState(t *testing.T) {
	t.Parallel()
	clk := newClock()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{Now: clk.Now, AuthorizationTTL: time.Hour, HoldSweep: -1})
	c := client(t, provider.URL)
	ctx := context.Background()
	tests := []struct {
		external string
		then     func(t *testing.T)
		want     string
	}{
		{"pi_active", nil, string(app.HoldActive)},
		{"pi_captured", func(t *testing.T) {
			req := capture(t, "y")
			req.AuthorizationKey = authKey("pi_captured")
			_, _ = c.Capture(ctx, req)
		}, string(app.HoldCaptured)},
		{"pi_voided", func(*testing.T) { _, _ = c.Void(ctx, voidOf("pi_voided")) }, string(app.HoldVoided)},
		{"pi_lapsed", func(*testing.T) { clk.advance(time.Hour) }, string(app.HoldExpired)},
		{"decline_auth", nil, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.external, func(t *testing.T) {
			if strings.HasPrefix(tc.external, "decline_") {
				_, _ = c.Authorize(ctx, authorization(t, tc.external))
			} else {
				hold(t, provider, tc.external, "10.50")
			}
			if tc.then != nil {
				tc.then(t)
			}
			if got := holdOutcome(t)(c.Hold(ctx, app.ProviderCharge{IdempotencyKey: authKey(tc.external)})); got != tc.want {
				t.Fatalf("Hold = %s, want %s", got, tc.want)
			}
		})
	}
	if got := holdOutcome(t)(c.Hold(ctx, app.ProviderCharge{IdempotencyKey: authKey("pi_never")})); got != "no charge" {
		t.Fatalf("Hold of no authorization = %s, want no charge", got)
	}
}

// Hold's answers from something else than the provider's record of the
// key, and holds it does not know, are unknown.
func TestHoldAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"the key's, active", 200, `{"id":"au_1","idempotencyKey":"k","status":"succeeded","hold":"active"}`, string(app.HoldActive)},
		{"the key's, expired", 200, `{"id":"au_1","idempotencyKey":"k","status":"succeeded","hold":"expired"}`, string(app.HoldExpired)},
		{"a hold it does not know", 200, `{"id":"au_1","idempotencyKey":"k","status":"succeeded","hold":"frozen"}`, "unknown"},
		{"no hold", 200, `{"id":"au_1","idempotencyKey":"k","status":"succeeded"}`, "unknown"},
		{"another key's", 200, `{"id":"au_1","idempotencyKey":"other","status":"succeeded","hold":"active"}`, "unknown"},
		{"a status it does not know", 200, `{"id":"au_1","idempotencyKey":"k","status":"pending","hold":"active"}`, "unknown"},
		{"not JSON", 200, `<html>ok</html>`, "unknown"},
		{"404 the provider's", 404, `{"error":{"type":"authorization_not_found"}}`, "no charge"},
		{"404 of another kind", 404, `{"error":{"type":"charge_not_found"}}`, "unknown"},
		{"404 from a proxy", 404, `<html>Not Found</html>`, "unknown"},
		{"409 in progress", 409, `{"error":{"type":"idempotency_request_in_progress"}}`, "unknown"},
		{"502 gateway page", 502, `<html>Bad Gateway</html>`, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := holdOutcome(t)(answeredBy(t, tc.status, tc.body).Hold(context.Background(), app.ProviderCharge{IdempotencyKey: "k"})); got != tc.want {
				t.Fatalf("Hold = %s, want %s", got, tc.want)
			}
		})
	}
}

// A void's answer is known by its key and its authorization: its amount
// and currency are the authorization's, which the void does not name, and
// it carries no reference since it was sent none. Anything else is not
// this void's answer.
func TestVoidAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	v := voidOf("pi_1")
	ours := `"idempotencyKey":"` + v.IdempotencyKey + `","authorization":"` + v.AuthorizationKey + `"`
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"200 the void's", 200, `{"id":"vo_1","status":"succeeded","amount":"99","currency":"EUR","reference":"",` + ours + `}`, string(app.ProviderApproved)},
		{"200 declined", 200, `{"id":"vo_1","status":"declined","amount":"99","currency":"RUB",` + ours + `}`, string(app.ProviderDeclined)},
		{"200 for another key", 200, `{"id":"vo_1","status":"succeeded","idempotencyKey":"void:other","authorization":"` + v.AuthorizationKey + `"}`, "unknown"},
		{"200 for another authorization", 200, `{"id":"vo_1","status":"succeeded","idempotencyKey":"` + v.IdempotencyKey + `","authorization":"authorization:other"}`, "unknown"},
		{"200 with a reference", 200, `{"id":"vo_1","status":"succeeded","reference":"vo_x",` + ours + `}`, "unknown"},
		{"200 unknown status", 200, `{"id":"vo_1","status":"pending",` + ours + `}`, "unknown"},
		{"200 not JSON", 200, `<html>ok</html>`, "unknown"},
		{"400", 400, `{"error":{"type":"invalid_request"}}`, "refused"},
		{"422", 422, `{"error":{"type":"invalid_request","voided":false}}`, "refused"},
		{"429", 429, `{"error":{"type":"rate_limited"}}`, "not charged"},
		{"503 nothing voided", 503, `{"error":{"type":"api_unavailable","voided":false}}`, "not charged"},
		{"503 speaking of a charge", 503, `{"error":{"type":"api_unavailable","charged":false}}`, "unknown"},
		{"409 in progress", 409, `{"error":{"type":"idempotency_request_in_progress"}}`, "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := outcome(answeredBy(t, tc.status, tc.body).Void(context.Background(), v)); got != tc.want {
				t.Fatalf("outcome = %s, want %s", got, tc.want)
			}
		})
	}
}

// A capture's answer names its authorization: one for another
// authorization is not this capture's, and a 503 that speaks of another
// kind says nothing of it.
func TestCaptureAnswersNameTheirAuthorization(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"id":"cp_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_1","authorization":"authorization:other"}`,
		`{"id":"cp_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_1"}`,
		`{"error":{"type":"api_unavailable","authorized":false}}`,
	} {
		status := map[bool]int{true: 200, false: 503}[strings.HasPrefix(body, `{"id"`)]
		if got := outcome(answeredBy(t, status, body).Capture(context.Background(), capture(t, "pi_1"))); got != "unknown" {
			t.Fatalf("capture answered %d %s: %s, want unknown", status, body, got)
		}
	}
}

// Every call of two-step payments stamps Request-Sent-At, as a charge
// does: a provider whose clock runs two minutes ahead, with a bound of
// one, finds every one too old and refuses it saying nothing was done
// (not charged, for now), counted by its kind.
func TestTwoStepCallsCarryTheirSendingTime(t *testing.T) {
	t.Parallel()
	var ahead atomic.Int64
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{MaxRequestAge: time.Minute,
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	c := client(t, provider.URL)
	ctx := context.Background()
	hold(t, provider, "pa_cp_1", "1000.00")
	hold(t, provider, "pi_v", "10.50")
	ahead.Store(int64(2 * time.Minute))
	calls := []struct {
		name    string
		call    func() (app.ProviderDecision, error)
		expired func(sandboxprovider.Ledger) int
	}{
		{"authorize", func() (app.ProviderDecision, error) { return c.Authorize(ctx, authorization(t, "pi_a")) },
			func(l sandboxprovider.Ledger) int { return l.AuthorizationCounters.Expired }},
		{"capture", func() (app.ProviderDecision, error) { return c.Capture(ctx, capture(t, "cp_1")) },
			func(l sandboxprovider.Ledger) int { return l.CaptureCounters.Expired }},
		{"void", func() (app.ProviderDecision, error) { return c.Void(ctx, voidOf("pi_v")) },
			func(l sandboxprovider.Ledger) int { return l.VoidCounters.Expired }},
	}
	for _, tc := range calls {
		if got := outcome(tc.call()); got != "not charged" {
			t.Fatalf("%s: %s, want not charged", tc.name, got)
		}
		if n := tc.expired(provider.Ledger()); n != 1 {
			t.Fatalf("%s: %d refused as too old, want 1", tc.name, n)
		}
	}
}

// net/http's own resend of a POST on a broken keep-alive connection is
// off for two-step calls too: a drop_ answer on a reused connection is
// unknown, and the provider saw exactly one request.
func TestNoHiddenResendOfTwoStepCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// call sends the drop_reused call; requests is how many requests
		// the provider saw under its key.
		call     func(t *testing.T, c *sandbox.Client, p *sandboxprovider.Server) (app.ProviderDecision, error)
		requests func(p *sandboxprovider.Server) int
	}{
		{"authorize", func(t *testing.T, c *sandbox.Client, _ *sandboxprovider.Server) (app.ProviderDecision, error) {
			return c.Authorize(context.Background(), authorization(t, "drop_reused"))
		}, func(p *sandboxprovider.Server) int {
			a, _ := p.LookupAuthorization(authKey("drop_reused"))
			return a.Requests
		}},
		{"capture", func(t *testing.T, c *sandbox.Client, p *sandboxprovider.Server) (app.ProviderDecision, error) {
			hold(t, p, "pa_drop_reused", "1000.00")
			return c.Capture(context.Background(), capture(t, "drop_reused"))
		}, func(p *sandboxprovider.Server) int { a, _ := p.LookupCapture("capture:drop_reused"); return a.Requests }},
		{"void", func(t *testing.T, c *sandbox.Client, p *sandboxprovider.Server) (app.ProviderDecision, error) {
			hold(t, p, "drop_reused", "10.50") // the void inherits its drop_
			return c.Void(context.Background(), voidOf("drop_reused"))
		}, func(p *sandboxprovider.Server) int { a, _ := p.LookupVoid("void:drop_reused"); return a.Requests }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{})
			c := client(t, provider.URL)
			// The first call leaves a keep-alive connection in the pool.
			if _, err := c.Authorize(context.Background(), authorization(t, "pi_warm")); err != nil {
				t.Fatal(err)
			}
			if got := outcome(tc.call(t, c, provider)); got != "unknown" {
				t.Fatalf("outcome = %s, want unknown: the answer was lost", got)
			}
			if n := tc.requests(provider); n != 1 {
				t.Fatalf("the provider saw %d requests under the key, want exactly one", n)
			}
		})
	}
}
