package sandboxprovider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// authorize asks for an authorization of amount RUB.
func authorize(t *testing.T, s *sandboxprovider.Server, key, amount, ref string, timeout time.Duration) answer {
	t.Helper()
	return post(t, s.URL+"/v1/authorizations", key, `{"amount":"`+amount+`","currency":"RUB","reference":"`+ref+`"}`, timeout)
}

// capture asks for a capture of amount RUB of the authorization made
// under authKey.
func capture(t *testing.T, s *sandboxprovider.Server, key, authKey, amount, ref string, timeout time.Duration) answer {
	t.Helper()
	return post(t, s.URL+"/v1/captures", key,
		`{"authorization":"`+authKey+`","amount":"`+amount+`","currency":"RUB","reference":"`+ref+`"}`, timeout)
}

// void asks for a void of the authorization made under authKey; an empty
// ref sends none.
func void(t *testing.T, s *sandboxprovider.Server, key, authKey, ref string, timeout time.Duration) answer {
	t.Helper()
	body := `{"authorization":"` + authKey + `"}`
	if ref != "" {
		body = `{"authorization":"` + authKey + `","reference":"` + ref + `"}`
	}
	return post(t, s.URL+"/v1/voids", key, body, timeout)
}

// held makes sure an authorization of 1000.00 RUB succeeded under key.
func held(t *testing.T, s *sandboxprovider.Server, key string) {
	t.Helper()
	if a := authorize(t, s, key, "1000.00", "pa_"+key, 5*time.Second); a.status != http.StatusOK || !strings.Contains(a.body, `"status":"succeeded"`) {
		t.Fatalf("the authorization %s: %+v", key, a)
	}
}

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

// holdOf is the hold state the lookup over HTTP answers for an
// authorization.
func holdOf(t *testing.T, s *sandboxprovider.Server, key string) sandboxprovider.AuthorizationState {
	t.Helper()
	var st sandboxprovider.AuthorizationState
	if err := json.Unmarshal([]byte(lookupBody(t, s, "/v1/authorizations", key)), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// One key is one authorization: the same parameters replay the first
// answer byte for byte, others are refused; the lookup adds the hold, which
// lapses AuthorizationTTL after the authorization by the provider's clock.
func TestOneKeyIsOneAuthorization(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := start(t, sandboxprovider.Config{Now: clk.Now, AuthorizationTTL: 48 * time.Hour, HoldSweep: -1})

	first := authorize(t, s, "a1", "100.50", "pi_1", 5*time.Second)
	var a sandboxprovider.AuthorizationAnswer
	if err := json.Unmarshal([]byte(first.body), &a); err != nil || first.status != http.StatusOK || first.replayed {
		t.Fatalf("first: %+v (%v)", first, err)
	}
	if !strings.HasPrefix(a.ID, "au_") || a.IdempotencyKey != "a1" || a.Status != sandboxprovider.StatusSucceeded ||
		a.Amount.String() != "100.5" || a.Reference != "pi_1" || !a.ExpiresAt.Equal(clk.Now().Add(48*time.Hour)) {
		t.Fatalf("answer = %+v", a)
	}
	if strings.Contains(first.body, `"hold"`) {
		t.Fatalf("the create answer %s carries the hold, which changes: replays would differ", first.body)
	}
	again := authorize(t, s, "a1", "100.5", "pi_1", 5*time.Second)
	if again.status != http.StatusOK || !again.replayed || again.body != first.body {
		t.Fatalf("replay: %+v, want the first answer, replayed", again)
	}
	other := authorize(t, s, "a1", "99.00", "pi_1", 5*time.Second)
	if typ, _ := errorType(t, other); other.status != http.StatusUnprocessableEntity || typ != sandboxprovider.ErrTypeKeyReused {
		t.Fatalf("other amount under the key: %+v, want 422 %s", other, sandboxprovider.ErrTypeKeyReused)
	}
	declined := authorize(t, s, "a2", "5", "decline_1", 5*time.Second)
	if declined.status != http.StatusOK || !strings.Contains(declined.body, `"status":"declined"`) || strings.Contains(declined.body, "expiresAt") {
		t.Fatalf("decline: %+v, want declined, with no hold to lapse", declined)
	}

	if st := holdOf(t, s, "a1"); st.Hold != sandboxprovider.HoldActive || !strings.HasPrefix(lookupBody(t, s, "/v1/authorizations", "a1"), strings.TrimSuffix(first.body, "}\n")) {
		t.Fatalf("lookup = %+v, want the answer with an active hold", st)
	}
	if st := holdOf(t, s, "a2"); st.Hold != "" {
		t.Fatalf("a declined authorization's lookup = %+v, want no hold", st)
	}
	ledger, err := sandboxprovider.FetchLedger(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if c := ledger.AuthorizationCounters; c.Authorizations != 1 || c.Declines != 1 || c.Replays != 1 || c.ParamConflicts != 1 || c.Requests != 4 {
		t.Fatalf("authorization counters = %+v", c)
	}
	if c := ledger.Counters; c.Charges != 0 || c.Requests != 0 {
		t.Fatalf("charge counters = %+v: authorizations are counted apart", c)
	}
	if got := ledger.SucceededAuthorizations("pi_1"); len(got) != 1 || got[0].Requests != 2 || got[0].Hold != sandboxprovider.HoldActive {
		t.Fatalf("authorizations for pi_1 = %+v", got)
	}
	if got := s.AuthorizationsFor("decline_1"); len(got) != 1 || got[0].Status != sandboxprovider.StatusDeclined {
		t.Fatalf("authorizations for decline_1 = %+v", got)
	}
	clk.advance(48*time.Hour - time.Nanosecond)
	if st := holdOf(t, s, "a1"); st.Hold != sandboxprovider.HoldActive {
		t.Fatalf("a nanosecond before its time: %+v, want active", st)
	}
	clk.advance(time.Nanosecond)
	if st := holdOf(t, s, "a1"); st.Hold != sandboxprovider.HoldExpired {
		t.Fatalf("at its time: %+v, want expired", st)
	}
	if again := authorize(t, s, "a1", "100.50", "pi_1", 5*time.Second); again.body != first.body {
		t.Fatalf("a replay after the lapse: %+v, want the first answer still", again)
	}
}

// Without a TTL of its own (nor SANDBOX_AUTHORIZATION_TTL), a hold lasts
// 7 days.
func TestHoldsLastAWeekByDefault(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := start(t, sandboxprovider.Config{Now: clk.Now, HoldSweep: -1})
	held(t, s, "a")
	if st := holdOf(t, s, "a"); !st.ExpiresAt.Equal(clk.Now().Add(7 * 24 * time.Hour)) {
		t.Fatalf("expiresAt %s, want 7 days after %s", st.ExpiresAt, clk.Now())
	}
}

// step is one request of a two-step scenario, and what it must get.
type step struct {
	do          string // authorize, capture, void, refund, or advance (the clock by TTL+d)
	key, target string // target: the authorization (a capture's, a void's) or what a refund names
	amount      string // in RUB, unless currency says otherwise
	currency    string
	ref         string
	want        string // succeeded, declined, refused (422, nothing done, nothing recorded)
	hold        sandboxprovider.HoldState
}

// The rules of a hold, scenario by scenario: what a capture may take, when
// a void may release, and what a refund of a capture may give back. Each
// scenario runs on a provider of its own with a clock it moves; the net
// figures are NetCaptured's at the end.
func TestHoldRules(t *testing.T) {
	t.Parallel()
	const ttl = time.Hour
	auth := step{do: "authorize", key: "a", amount: "100.00", ref: "pi_1", want: "succeeded", hold: sandboxprovider.HoldActive}
	tests := []struct {
		name           string
		steps          []step
		captured, refd string // NetCaptured's Captured and Refunded for pi_1
	}{
		{"a full capture", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "100.00", ref: "cp_1", want: "succeeded", hold: sandboxprovider.HoldCaptured},
		}, "100", "0"},
		{"a partial capture releases the rest", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "60.00", ref: "cp_1", want: "succeeded", hold: sandboxprovider.HoldCaptured},
			{do: "capture", key: "c2", target: "a", amount: "40.00", ref: "cp_2", want: "refused", hold: sandboxprovider.HoldCaptured},
		}, "60", "0"},
		{"a second capture under another key", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "10.00", ref: "cp_1", want: "succeeded"},
			{do: "capture", key: "c2", target: "a", amount: "10.00", ref: "cp_1", want: "refused", hold: sandboxprovider.HoldCaptured},
		}, "10", "0"},
		{"more than the authorization", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "100.01", ref: "cp_1", want: "refused", hold: sandboxprovider.HoldActive},
			{do: "capture", key: "c1", target: "a", amount: "100.00", ref: "cp_1", want: "succeeded", hold: sandboxprovider.HoldCaptured},
		}, "100", "0"},
		{"another currency", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "1.00", currency: "EUR", ref: "cp_1", want: "refused", hold: sandboxprovider.HoldActive},
		}, "0", "0"},
		{"a declined capture leaves the hold", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "100.00", ref: "decline_c", want: "declined", hold: sandboxprovider.HoldActive},
			{do: "capture", key: "c2", target: "a", amount: "100.00", ref: "cp_2", want: "succeeded", hold: sandboxprovider.HoldCaptured},
		}, "100", "0"},
		{"a void releases the hold", []step{auth,
			{do: "void", key: "v1", target: "a", want: "succeeded", hold: sandboxprovider.HoldVoided},
			{do: "capture", key: "c1", target: "a", amount: "1.00", ref: "cp_1", want: "refused", hold: sandboxprovider.HoldVoided},
			{do: "void", key: "v2", target: "a", ref: "vo_2", want: "refused", hold: sandboxprovider.HoldVoided},
		}, "0", "0"},
		{"a void after the capture", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "30.00", ref: "cp_1", want: "succeeded"},
			{do: "void", key: "v1", target: "a", want: "refused", hold: sandboxprovider.HoldCaptured},
		}, "30", "0"},
		{"a declined void leaves the hold", []step{auth,
			{do: "void", key: "v1", target: "a", ref: "decline_v", want: "declined", hold: sandboxprovider.HoldActive},
			{do: "capture", key: "c1", target: "a", amount: "100.00", ref: "cp_1", want: "succeeded", hold: sandboxprovider.HoldCaptured},
		}, "100", "0"},
		{"a lapsed hold", []step{auth,
			{do: "advance", want: "succeeded", hold: sandboxprovider.HoldExpired},
			{do: "capture", key: "c1", target: "a", amount: "1.00", ref: "cp_1", want: "refused", hold: sandboxprovider.HoldExpired},
			{do: "void", key: "v1", target: "a", want: "refused", hold: sandboxprovider.HoldExpired},
		}, "0", "0"},
		{"a capture just before the lapse", []step{auth,
			{do: "advance", amount: "-1ns", want: "succeeded", hold: sandboxprovider.HoldActive},
			{do: "capture", key: "c1", target: "a", amount: "1.00", ref: "cp_1", want: "succeeded", hold: sandboxprovider.HoldCaptured},
			{do: "advance", want: "succeeded", hold: sandboxprovider.HoldCaptured},
		}, "1", "0"},
		{"a declined authorization holds nothing", []step{
			{do: "authorize", key: "a", amount: "100.00", ref: "decline_a", want: "declined"},
			{do: "capture", key: "c1", target: "a", amount: "1.00", ref: "cp_1", want: "refused"},
			{do: "void", key: "v1", target: "a", want: "refused"},
		}, "0", "0"},
		{"no authorization", []step{
			{do: "capture", key: "c1", target: "nope", amount: "1.00", ref: "cp_1", want: "refused"},
			{do: "void", key: "v1", target: "nope", want: "refused"},
		}, "0", "0"},
		{"refunds of the capture, up to what it took", []step{auth,
			{do: "capture", key: "c1", target: "a", amount: "60.00", ref: "cp_1", want: "succeeded"},
			{do: "refund", key: "r1", target: "c1", amount: "50.00", ref: "re_1", want: "succeeded"},
			{do: "refund", key: "r2", target: "c1", amount: "10.01", ref: "re_2", want: "refused"},
			{do: "refund", key: "r3", target: "c1", amount: "10.00", ref: "re_3", want: "succeeded"},
			{do: "refund", key: "r4", target: "c1", amount: "1.00", currency: "EUR", ref: "re_4", want: "refused"},
		}, "60", "60"},
		{"a refund names the capture, not the authorization", []step{auth,
			{do: "refund", key: "r1", target: "a", amount: "1.00", ref: "re_1", want: "refused"},
			{do: "capture", key: "c1", target: "a", amount: "60.00", ref: "decline_c", want: "declined"},
			{do: "refund", key: "r2", target: "c1", amount: "1.00", ref: "re_2", want: "refused"},
			{do: "capture", key: "c2", target: "a", amount: "60.00", ref: "cp_2", want: "succeeded"},
			{do: "refund", key: "r3", target: "a", amount: "1.00", ref: "re_3", want: "refused"},
		}, "60", "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			s := start(t, sandboxprovider.Config{Now: clk.Now, AuthorizationTTL: ttl, HoldSweep: -1})
			for i, st := range tc.steps {
				if st.currency == "" {
					st.currency = "RUB"
				}
				var a answer
				var path string
				switch st.do {
				case "authorize":
					path = "/v1/authorizations"
					a = post(t, s.URL+path, st.key, bodyOf(st), 5*time.Second)
				case "capture":
					path = "/v1/captures"
					a = post(t, s.URL+path, st.key, bodyOf(st), 5*time.Second)
				case "void":
					path = "/v1/voids"
					a = post(t, s.URL+path, st.key, bodyOf(st), 5*time.Second)
				case "refund":
					path = "/v1/refunds"
					a = post(t, s.URL+path, st.key, bodyOf(st), 5*time.Second)
				case "advance":
					d := ttl
					if st.amount != "" {
						off, _ := time.ParseDuration(st.amount)
						d += off
					}
					clk.advance(d)
				}
				switch {
				case st.do == "advance":
				case st.want == "refused":
					if !refusedForGood(t, a) {
						t.Fatalf("step %d (%s %s): %+v, want 422 invalid_request, nothing done", i, st.do, st.key, a)
					}
					if got := lookupBody(t, s, path, st.key); !strings.Contains(got, "_not_found") {
						t.Fatalf("step %d: the refused key's lookup = %s, want nothing under it", i, got)
					}
				default:
					if a.status != http.StatusOK || !strings.Contains(a.body, `"status":"`+st.want+`"`) {
						t.Fatalf("step %d (%s %s): %+v, want %s", i, st.do, st.key, a, st.want)
					}
					if again := post(t, s.URL+path, st.key, bodyOf(st), 5*time.Second); !again.replayed || again.body != a.body {
						t.Fatalf("step %d: the replay %+v differs from %s", i, again, a.body)
					}
				}
				if st.hold != "" {
					if got := holdOf(t, s, "a").Hold; got != st.hold {
						t.Fatalf("step %d (%s %s): hold %q, want %q", i, st.do, st.key, got, st.hold)
					}
				}
			}
			n := s.NetCaptured("pi_1")
			if len(n.Violations) != 0 || n.Captured.String() != tc.captured || n.Refunded.String() != tc.refd ||
				!n.Net.Equal(n.Captured.Sub(n.Refunded)) || n.Captures > 1 {
				t.Fatalf("NetCaptured = %+v, want captured %s, refunded %s, no violation", n, tc.captured, tc.refd)
			}
		})
	}
}

// bodyOf is the body of a step's request, for its replay.
func bodyOf(st step) string {
	switch st.do {
	case "void":
		if st.ref == "" {
			return `{"authorization":"` + st.target + `"}`
		}
		return `{"authorization":"` + st.target + `","reference":"` + st.ref + `"}`
	case "authorize":
		return `{"amount":"` + st.amount + `","currency":"` + st.currency + `","reference":"` + st.ref + `"}`
	case "capture":
		return `{"authorization":"` + st.target + `","amount":"` + st.amount + `","currency":"` + st.currency + `","reference":"` + st.ref + `"}`
	default:
		return `{"charge":"` + st.target + `","amount":"` + st.amount + `","currency":"` + st.currency + `","reference":"` + st.ref + `"}`
	}
}

// A capture and a void of one hold, or two captures of it under other
// keys, processed at the same time: exactly one succeeds, the other is
// refused for good, and the hold says which won. Round by round, each
// pair held in processing so that they overlap.
func TestRacesForAHoldHaveOneWinner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		second func(t *testing.T, s *sandboxprovider.Server, round int, authKey string) answer
	}{
		{"capture and void", func(t *testing.T, s *sandboxprovider.Server, round int, authKey string) answer {
			return void(t, s, fmt.Sprintf("v%d", round), authKey, "", 5*time.Second)
		}},
		{"two captures", func(t *testing.T, s *sandboxprovider.Server, round int, authKey string) answer {
			return capture(t, s, fmt.Sprintf("c%d-b", round), authKey, "5.00", fmt.Sprintf("cp_%d_b", round), 5*time.Second)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, sandboxprovider.Config{Latency: 30 * time.Millisecond})
			for round := range 8 {
				authKey := fmt.Sprintf("a%d", round)
				held(t, s, authKey)
				var first, second answer
				var wg sync.WaitGroup
				wg.Go(func() {
					first = capture(t, s, fmt.Sprintf("c%d", round), authKey, "10.00", fmt.Sprintf("cp_%d", round), 5*time.Second)
				})
				wg.Go(func() { second = tc.second(t, s, round, authKey) })
				wg.Wait()
				won := 0
				for _, a := range []answer{first, second} {
					switch {
					case a.status == http.StatusOK && strings.Contains(a.body, `"status":"succeeded"`):
						won++
					case refusedForGood(t, a):
					default:
						t.Fatalf("round %d: answer %+v", round, a)
					}
				}
				hold, _ := s.LookupAuthorization(authKey)
				if won != 1 || (hold.Hold != sandboxprovider.HoldCaptured && hold.Hold != sandboxprovider.HoldVoided) {
					t.Fatalf("round %d: %d succeeded, hold %+v; want exactly one", round, won, hold)
				}
				if n := s.NetCaptured("pa_" + authKey); len(n.Violations) != 0 || n.Captures+n.Voids != 1 {
					t.Fatalf("round %d: %+v", round, n)
				}
			}
		})
	}
}

// A hold that lapses is noticed once, by whichever comes first at or after
// its time (a request of any kind, the server's sweep, ExpireHolds), and
// reported once: one authorization.expired event whose data is the lookup
// with the hold expired.
func TestLapsedHoldsAreReportedOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		sweep  time.Duration
		notice func(t *testing.T, s *sandboxprovider.Server)
	}{
		{"by a request of another kind", -1, func(t *testing.T, s *sandboxprovider.Server) {
			create(t, s, "ck", "1.00", "pi_other", 5*time.Second)
		}},
		{"by ExpireHolds", -1, func(t *testing.T, s *sandboxprovider.Server) {
			if n := s.ExpireHolds(); n != 1 {
				t.Fatalf("ExpireHolds = %d, want 1", n)
			}
		}},
		{"by the sweep", 10 * time.Millisecond, func(t *testing.T, s *sandboxprovider.Server) {
			deadline := time.Now().Add(5 * time.Second)
			for s.AuthorizationCounters().Expirations == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the sweep noticed no lapse in 5s")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			r := newReceiver(t, always(http.StatusOK))
			s := start(t, sandboxprovider.Config{Now: clk.Now, AuthorizationTTL: time.Hour, HoldSweep: tc.sweep, Seed: 7,
				Webhooks: sandboxprovider.WebhookConfig{URL: r.URL, Secret: testSecret, FirstRetry: 20 * time.Millisecond}})
			held(t, s, "a")
			held(t, s, "b")
			capture(t, s, "cb", "b", "1.00", "cp_b", 5*time.Second) // captured: it never lapses
			clk.advance(time.Hour)
			tc.notice(t, s)
			if n := s.ExpireHolds(); n != 0 {
				t.Fatalf("a second ExpireHolds found %d, want 0", n)
			}
			quiet(t, s, 10*time.Second)
			var expired []arrival
			for _, d := range r.delivered() {
				if d.event.Type == "authorization.expired" {
					expired = append(expired, d)
				}
			}
			if len(expired) != 1 || string(expired[0].event.Data) != lookupBody(t, s, "/v1/authorizations", "a") ||
				!strings.Contains(string(expired[0].event.Data), `"hold":"expired"`) {
				t.Fatalf("expired events %+v, want one with a's lookup %s", expired, lookupBody(t, s, "/v1/authorizations", "a"))
			}
			if !expired[0].event.Created.Equal(clk.Now()) {
				t.Errorf("the event was created %s, want when the provider noticed, %s", expired[0].event.Created, clk.Now())
			}
			if c := s.AuthorizationCounters(); c.Expirations != 1 {
				t.Fatalf("counters %+v, want one expiration", c)
			}
		})
	}
}

// Every decision of a two-step payment is one event, signed and delivered,
// its data the object as the lookup answered it then; a refusal makes
// none. A void sent without a reference meets its authorization's webhook
// fault, as a void with one meets its own.
func TestTwoStepDecisionsAreDelivered(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, always(http.StatusOK))
	s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{})
	authorize(t, s, "a1", "100.00", "pi_1", 5*time.Second)
	activeA1 := lookupBody(t, s, "/v1/authorizations", "a1")
	authorize(t, s, "a2", "100.00", "decline_a", 5*time.Second)
	authorize(t, s, "a3", "100.00", "hookdup_3", 5*time.Second) // its void inherits the duplicate
	authorize(t, s, "a4", "100.00", "pi_4", 5*time.Second)
	capture(t, s, "c1d", "a1", "10.00", "decline_c", 5*time.Second)
	capture(t, s, "c1", "a1", "10.00", "cp_1", 5*time.Second)
	capture(t, s, "c1x", "a1", "10.00", "cp_x", 5*time.Second) // refused: no event
	refund(t, s, "r1", "c1", "5.00", "re_1", 5*time.Second)
	void(t, s, "v3", "a3", "", 5*time.Second)
	void(t, s, "v4d", "a4", "decline_v", 5*time.Second)

	c := quiet(t, s, 10*time.Second)
	want := map[string]struct {
		typ, data string
		n         int
	}{
		"a1":  {"authorization.succeeded", activeA1, 1},
		"a2":  {"authorization.declined", lookupBody(t, s, "/v1/authorizations", "a2"), 1},
		"a4":  {"authorization.succeeded", lookupBody(t, s, "/v1/authorizations", "a4"), 1},
		"c1d": {"capture.declined", lookupBody(t, s, "/v1/captures", "c1d"), 1},
		"c1":  {"capture.succeeded", lookupBody(t, s, "/v1/captures", "c1"), 1},
		"r1":  {"refund.succeeded", lookupBody(t, s, "/v1/refunds", "r1"), 1},
		"v3":  {"void.succeeded", lookupBody(t, s, "/v1/voids", "v3"), 2},
		"v4d": {"void.declined", lookupBody(t, s, "/v1/voids", "v4d"), 1},
	}
	got := map[string]int{}
	for _, a := range r.delivered() {
		var obj struct {
			IdempotencyKey string `json:"idempotencyKey"`
		}
		_ = json.Unmarshal(a.event.Data, &obj)
		got[obj.IdempotencyKey]++
		if obj.IdempotencyKey == "a3" {
			continue // its hold was active when the event was made: not what the lookup says now
		}
		w, ok := want[obj.IdempotencyKey]
		if !ok || a.event.Type != w.typ || string(a.event.Data) != w.data {
			t.Errorf("event %s %s data %s; want %s %s", a.event.ID, a.event.Type, a.event.Data, w.typ, w.data)
		}
	}
	for key, w := range want {
		if got[key] != w.n {
			t.Errorf("%s delivered %d times, want %d", key, got[key], w.n)
		}
	}
	if got["a3"] != 2 || got["c1x"] != 0 || c.Events != 9 || c.Faults[sandboxprovider.WebhookDuplicate] != 2 {
		t.Errorf("deliveries %v, counters %+v: want a3 and its void twice, nothing for the refused capture, 9 events", got, c)
	}
}

// The ledger's figures of a two-step payment add up across its keys, and
// would name a capture above its authorization or a refund above its
// capture: NetCaptured judges a ledger as a test in another process reads
// it.
func TestNetCapturedJudgesALedger(t *testing.T) {
	t.Parallel()
	dec := decimal.RequireFromString
	auth := func(key, amount string) sandboxprovider.Authorization {
		var a sandboxprovider.Authorization
		a.IdempotencyKey, a.Reference, a.Status, a.Amount, a.Currency = key, "pi_1", sandboxprovider.StatusSucceeded, dec(amount), "RUB"
		return a
	}
	capt := func(key, authKey, amount string) sandboxprovider.Capture {
		var c sandboxprovider.Capture
		c.IdempotencyKey, c.Authorization, c.Status, c.Amount, c.Currency = key, authKey, sandboxprovider.StatusSucceeded, dec(amount), "RUB"
		return c
	}
	ref := func(chargeKey, amount string) sandboxprovider.Refund {
		var r sandboxprovider.Refund
		r.Charge, r.Status, r.Amount, r.Currency = chargeKey, sandboxprovider.StatusSucceeded, dec(amount), "RUB"
		return r
	}
	voided := func(authKey string) sandboxprovider.Void {
		var v sandboxprovider.Void
		v.Authorization, v.Status = authKey, sandboxprovider.StatusSucceeded
		return v
	}
	tests := []struct {
		name       string
		ledger     sandboxprovider.Ledger
		net        string
		violations int
	}{
		{"captured and partly refunded", sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{auth("a", "100")},
			Captures:       []sandboxprovider.Capture{capt("c", "a", "60")},
			Refunds:        []sandboxprovider.Refund{ref("c", "20"), ref("other", "5")},
		}, "40", 0},
		{"captured above the authorization", sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{auth("a", "100")},
			Captures:       []sandboxprovider.Capture{capt("c", "a", "100.01")},
		}, "100.01", 1},
		{"captured twice", sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{auth("a", "100")},
			Captures:       []sandboxprovider.Capture{capt("c1", "a", "10"), capt("c2", "a", "10")},
		}, "20", 1},
		{"refunded above the capture", sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{auth("a", "100")},
			Captures:       []sandboxprovider.Capture{capt("c", "a", "10")},
			Refunds:        []sandboxprovider.Refund{ref("c", "6"), ref("c", "6")},
		}, "-2", 1},
		{"captured and voided", sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{auth("a", "100")},
			Captures:       []sandboxprovider.Capture{capt("c", "a", "10")},
			Voids:          []sandboxprovider.Void{voided("a")},
		}, "10", 1},
	}
	for _, tc := range tests {
		n := tc.ledger.NetCaptured("pi_1")
		if n.Net.String() != tc.net || len(n.Violations) != tc.violations {
			t.Errorf("%s: %+v, want net %s and %d violations", tc.name, n, tc.net, tc.violations)
		}
	}
}
