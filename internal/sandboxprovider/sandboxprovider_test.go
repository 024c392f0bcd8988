package sandboxprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

func start(t *testing.T, cfg sandboxprovider.Config) *sandboxprovider.Server {
	return sandboxprovider.StartForTest(t, cfg)
}

type answer struct {
	status   int
	replayed bool
	body     string
	err      error // transport error: no answer at all
}

func create(t *testing.T, s *sandboxprovider.Server, key, amount, ref string, timeout time.Duration) answer {
	t.Helper()
	return post(t, s.URL+"/v1/charges", key, `{"amount":"`+amount+`","currency":"RUB","reference":"`+ref+`"}`, timeout)
}

// refund asks for a refund of amount RUB of the charge made under chargeKey.
func refund(t *testing.T, s *sandboxprovider.Server, key, chargeKey, amount, ref string, timeout time.Duration) answer {
	t.Helper()
	return post(t, s.URL+"/v1/refunds", key,
		`{"charge":"`+chargeKey+`","amount":"`+amount+`","currency":"RUB","reference":"`+ref+`"}`, timeout)
}

func post(t *testing.T, url, key, body string, timeout time.Duration) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil // or net/http resends it by itself after a dropped connection
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: string(b), err: err}
}

// errorType returns an error answer's type and its "charged",
// "refunded", "authorized", "captured" or "voided" flag, whichever it has.
func errorType(t *testing.T, a answer) (string, *bool) {
	t.Helper()
	var e sandboxprovider.ErrorBody
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	var flag *bool
	for _, f := range []*bool{e.Error.Charged, e.Error.Refunded, e.Error.Authorized, e.Error.Captured, e.Error.Voided} {
		if f != nil && flag != nil {
			t.Fatalf("error body %q has more than one flag", a.body)
		}
		if f != nil {
			flag = f
		}
	}
	return e.Error.Type, flag
}

// apiKind is one kind of keyed request, for the tests that hold for every
// kind: the idempotency promises, the faults, the lookup.
type apiKind struct {
	name   string
	path   string // of the create call and the lookup
	create func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer
	// made reports whether the key holds a decision, and succeeded counts
	// the succeeded decisions for a reference, in the ledger.
	made      func(s *sandboxprovider.Server, key string) bool
	succeeded func(s *sandboxprovider.Server, ref string) int
	counters  func(s *sandboxprovider.Server) sandboxprovider.KeyCounters
	// body is a create call's body for key, with what it needs made first.
	body func(t *testing.T, s *sandboxprovider.Server, key string) string
}

// kinds are charges, refunds, authorizations, captures and voids. A
// refund refunds 1.00 of a charge of 1000.00 under the key "big", which
// each test's provider makes first (prepare); a capture (void) of key K
// captures 1.00 of (voids) an authorization of 1000.00 under "auth-K",
// made first by the create call itself.
var kinds = []apiKind{
	{
		name: "charges", path: "/v1/charges",
		create: func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer {
			return create(t, s, key, "1.00", ref, timeout)
		},
		made:      func(s *sandboxprovider.Server, key string) bool { _, ok := s.Lookup(key); return ok },
		succeeded: func(s *sandboxprovider.Server, ref string) int { return len(s.Ledger().Succeeded(ref)) },
		counters:  func(s *sandboxprovider.Server) sandboxprovider.KeyCounters { return s.Counters().KeyCounters },
		body: func(*testing.T, *sandboxprovider.Server, string) string {
			return `{"amount":"1.00","currency":"RUB","reference":"pi_aged"}`
		},
	},
	{
		name: "refunds", path: "/v1/refunds",
		create: func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer {
			return refund(t, s, key, "big", "1.00", ref, timeout)
		},
		made:      func(s *sandboxprovider.Server, key string) bool { _, ok := s.LookupRefund(key); return ok },
		succeeded: func(s *sandboxprovider.Server, ref string) int { return len(s.Ledger().SucceededRefunds(ref)) },
		counters:  func(s *sandboxprovider.Server) sandboxprovider.KeyCounters { return s.RefundCounters().KeyCounters },
		body: func(*testing.T, *sandboxprovider.Server, string) string {
			return `{"charge":"big","amount":"1.00","currency":"RUB","reference":"re_aged"}`
		},
	},
	{
		name: "authorizations", path: "/v1/authorizations",
		create: func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer {
			return authorize(t, s, key, "1.00", ref, timeout)
		},
		made:      func(s *sandboxprovider.Server, key string) bool { _, ok := s.LookupAuthorization(key); return ok },
		succeeded: func(s *sandboxprovider.Server, ref string) int { return len(s.Ledger().SucceededAuthorizations(ref)) },
		counters: func(s *sandboxprovider.Server) sandboxprovider.KeyCounters {
			return s.AuthorizationCounters().KeyCounters
		},
		body: func(*testing.T, *sandboxprovider.Server, string) string {
			return `{"amount":"1.00","currency":"RUB","reference":"pa_aged"}`
		},
	},
	{
		name: "captures", path: "/v1/captures",
		create: func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer {
			held(t, s, "auth-"+key)
			return capture(t, s, key, "auth-"+key, "1.00", ref, timeout)
		},
		made:      func(s *sandboxprovider.Server, key string) bool { _, ok := s.LookupCapture(key); return ok },
		succeeded: func(s *sandboxprovider.Server, ref string) int { return len(s.Ledger().SucceededCaptures(ref)) },
		counters:  func(s *sandboxprovider.Server) sandboxprovider.KeyCounters { return s.CaptureCounters().KeyCounters },
		body: func(t *testing.T, s *sandboxprovider.Server, key string) string {
			held(t, s, "auth-"+key)
			return `{"authorization":"auth-` + key + `","amount":"1.00","currency":"RUB","reference":"cp_aged"}`
		},
	},
	{
		name: "voids", path: "/v1/voids",
		create: func(t *testing.T, s *sandboxprovider.Server, key, ref string, timeout time.Duration) answer {
			held(t, s, "auth-"+key)
			return void(t, s, key, "auth-"+key, ref, timeout)
		},
		made:      func(s *sandboxprovider.Server, key string) bool { _, ok := s.LookupVoid(key); return ok },
		succeeded: func(s *sandboxprovider.Server, ref string) int { return len(s.Ledger().SucceededVoids(ref)) },
		counters:  func(s *sandboxprovider.Server) sandboxprovider.KeyCounters { return s.VoidCounters().KeyCounters },
		body: func(t *testing.T, s *sandboxprovider.Server, key string) string {
			held(t, s, "auth-"+key)
			return `{"authorization":"auth-` + key + `","reference":"vo_aged"}`
		},
	},
}

// prepare makes the charge the refunds of kinds refund.
func prepare(t *testing.T, s *sandboxprovider.Server) {
	t.Helper()
	if a := create(t, s, "big", "1000.00", "pi_big", 5*time.Second); a.status != http.StatusOK {
		t.Fatalf("the charge to refund: %+v", a)
	}
}

// The idempotency promises: same key and parameters replay and charge
// nothing new; other parameters are refused; the ledger over HTTP agrees.
func TestOneKeyIsOneCharge(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{})

	first := create(t, s, "k1", "100.50", "pi_1", 5*time.Second)
	if first.status != http.StatusOK || first.replayed || !strings.Contains(first.body, `"status":"succeeded"`) {
		t.Fatalf("first: %+v", first)
	}
	again := create(t, s, "k1", "100.5", "pi_1", 5*time.Second) // the same amount, written otherwise
	if again.status != http.StatusOK || !again.replayed || again.body != first.body {
		t.Fatalf("replay: %+v, want the first answer, replayed", again)
	}
	other := create(t, s, "k1", "999.00", "pi_1", 5*time.Second)
	if typ, _ := errorType(t, other); other.status != http.StatusUnprocessableEntity || typ != sandboxprovider.ErrTypeKeyReused {
		t.Fatalf("other amount under the key: %+v, want 422 %s", other, sandboxprovider.ErrTypeKeyReused)
	}
	declined := create(t, s, "k2", "5", "decline_1", 5*time.Second)
	if declined.status != http.StatusOK || !strings.Contains(declined.body, `"status":"declined"`) {
		t.Fatalf("decline: %+v", declined)
	}

	ledger, err := sandboxprovider.FetchLedger(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := ledger.Counters
	if c.Charges != 1 || c.Declines != 1 || c.Replays != 1 || c.ParamConflicts != 1 || c.Requests != 4 {
		t.Fatalf("counters = %+v", c)
	}
	if got := ledger.Succeeded("pi_1"); len(got) != 1 || got[0].Amount.String() != "100.5" || got[0].Requests != 2 {
		t.Fatalf("charges for pi_1 = %+v", got)
	}
	if len(ledger.Charges) != 2 {
		t.Fatalf("ledger has %d charges, want 2", len(ledger.Charges))
	}
	if _, ok := s.Lookup("k1"); !ok {
		t.Fatal("lookup of a charged key found nothing")
	}
}

// A second request while the first is processed is refused as in progress,
// and does nothing.
func TestSameKeyWhileProcessingIsInProgress(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, sandboxprovider.Config{Latency: 500 * time.Millisecond})
			prepare(t, s)
			var wg sync.WaitGroup
			var first answer
			seen := k.counters(s).Requests
			wg.Go(func() { first = k.create(t, s, "k", "pi_x", 5*time.Second) })
			waitForRequests(t, s, k, seen+1)
			second := k.create(t, s, "k", "pi_x", 5*time.Second)
			wg.Wait()
			if typ, _ := errorType(t, second); second.status != http.StatusConflict || typ != sandboxprovider.ErrTypeInProgress {
				t.Fatalf("second: %+v, want 409 in progress", second)
			}
			if first.status != http.StatusOK {
				t.Fatalf("first: %+v", first)
			}
			if n, c := k.succeeded(s, "pi_x"), k.counters(s); n != 1 || c.InProgressRefusals != 1 {
				t.Fatalf("%d made, counters = %+v", n, c)
			}
		})
	}
}

// waitForRequests waits until the provider has seen n requests of kind k.
func waitForRequests(t *testing.T, s *sandboxprovider.Server, k apiKind, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for k.counters(s).Requests < n {
		if time.Now().After(deadline) {
			t.Fatalf("the provider saw %d %s requests in 5s, want %d", k.counters(s).Requests, k.name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Each prefix fault does what the package documentation says, to the first
// request of a key; the retry gets the charge (or refund), made once.
func TestPrefixFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ref      string
		check    func(t *testing.T, a answer) bool
		madeOnce bool // after the first request
		retryOK  bool // the retry with the same key answers 200
	}{
		{"fail_1", func(t *testing.T, a answer) bool {
			typ, done := errorType(t, a)
			return a.status == http.StatusServiceUnavailable && typ == sandboxprovider.ErrTypeUnavailable && done != nil && !*done
		}, false, false},
		{"drop_1", func(_ *testing.T, a answer) bool { return a.err != nil }, true, true},
		{"gw502_1", func(_ *testing.T, a answer) bool { return a.status == http.StatusBadGateway }, true, true},
		{"slow_1", func(_ *testing.T, a answer) bool {
			var ne interface{ Timeout() bool }
			return errors.As(a.err, &ne) && ne.Timeout()
		}, true, true},
		{"busy_1", inProgress, false, true},
		{"refuse_1", refusedForGood, false, false},
		{"refuseonce_1", refusedForGood, false, true},
		{"busyrefuse_1", inProgress, false, false},
		{"droprefuse_1", func(_ *testing.T, a answer) bool { return a.err != nil }, true, false},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, sandboxprovider.Config{SlowDelay: 2 * time.Second})
			prepare(t, s)
			for _, tc := range tests {
				t.Run(tc.ref, func(t *testing.T) {
					key := "key-" + tc.ref
					first := k.create(t, s, key, tc.ref, 500*time.Millisecond)
					if !tc.check(t, first) {
						t.Fatalf("first request: %+v", first)
					}
					if made := k.made(s, key); made != tc.madeOnce {
						t.Fatalf("made after the first request = %v, want %v", made, tc.madeOnce)
					}
					retry := k.create(t, s, key, tc.ref, 5*time.Second)
					if ok := retry.status == http.StatusOK; ok != tc.retryOK {
						t.Fatalf("retry: %+v, want 200 = %v", retry, tc.retryOK)
					}
					if !tc.retryOK && !refusedForGood(t, retry) && tc.ref != "fail_1" {
						t.Fatalf("retry of %s: %+v, want 422 saying nothing was done", tc.ref, retry)
					}
					if n := k.succeeded(s, tc.ref); n != btoi(tc.retryOK || tc.madeOnce) {
						t.Fatalf("succeeded for %s = %d", tc.ref, n)
					}
				})
			}
		})
	}
}

// A request that arrives more than MaxRequestAge after its
// Request-Sent-At is refused before anything else (503 request_expired,
// nothing done, counted); a younger one, and one without the header, is
// processed. Every kind alike.
func TestRequestsOlderThanTheBoundAreRefused(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, sandboxprovider.Config{MaxRequestAge: time.Second})
			prepare(t, s)
			send := func(key string, sentAt string, declared ...string) answer {
				req, err := http.NewRequest(http.MethodPost, s.URL+k.path, strings.NewReader(k.body(t, s, key)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/json")
				if sentAt != "" {
					req.Header.Set(sandboxprovider.HeaderRequestSentAt, sentAt)
				}
				for _, d := range declared {
					req.Header.Set(sandboxprovider.HeaderRequestMaxAge, d)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return answer{status: resp.StatusCode, body: string(b)}
			}
			old := send("aged", time.Now().Add(-2*time.Second).Format(time.RFC3339Nano))
			typ, done := errorType(t, old)
			if old.status != http.StatusServiceUnavailable || typ != sandboxprovider.ErrTypeRequestExpired || done == nil || *done {
				t.Fatalf("a request 2 s old: %+v, want 503 request_expired saying nothing was done", old)
			}
			if k.made(s, "aged") || k.counters(s).Expired != 1 {
				t.Fatalf("after the old request: made %v, expired %d; want nothing made, one counted", k.made(s, "aged"), k.counters(s).Expired)
			}
			if a := send("aged", time.Now().Format(time.RFC3339Nano)); a.status != http.StatusOK || !k.made(s, "aged") {
				t.Fatalf("a fresh request under the key: %+v, want it processed", a)
			}
			if a := send("unstamped", ""); a.status != http.StatusOK {
				t.Fatalf("a request without the header: %+v, want it processed", a)
			}
			// A client that declares a shorter bound (the one it waits
			// out) is held to it; a longer one changes nothing.
			if a := send("declared", time.Now().Add(-300*time.Millisecond).Format(time.RFC3339Nano), "200"); a.status != http.StatusServiceUnavailable || k.made(s, "declared") {
				t.Fatalf("a request 300 ms old that declares 200 ms: %+v, want it refused, nothing made", a)
			}
			if a := send("declared-long", time.Now().Add(-2*time.Second).Format(time.RFC3339Nano), "60000"); a.status != http.StatusServiceUnavailable || k.made(s, "declared-long") {
				t.Fatalf("a request 2 s old that declares 60 s: %+v, want it refused by the provider's own 1 s", a)
			}
			if a := send("declared-fresh", time.Now().Format(time.RFC3339Nano), "200"); a.status != http.StatusOK {
				t.Fatalf("a fresh request that declares 200 ms: %+v, want it processed", a)
			}
		})
	}
}

// refusedForGood checks a permanent refusal: 422 invalid_request, saying
// nothing was charged (or refunded).
func refusedForGood(t *testing.T, a answer) bool {
	typ, done := errorType(t, a)
	return a.status == http.StatusUnprocessableEntity && typ == sandboxprovider.ErrTypeInvalidRequest && done != nil && !*done
}

// inProgress checks a 409 in-progress refusal.
func inProgress(t *testing.T, a answer) bool {
	typ, _ := errorType(t, a)
	return a.status == http.StatusConflict && typ == sandboxprovider.ErrTypeInProgress
}

// The lookup by key tells the three states apart: nothing made (404), a
// request still being processed (409: it may yet charge or refund, so it
// is not "none"), and the decision (200).
func TestLookupByKey(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, sandboxprovider.Config{Latency: 500 * time.Millisecond})
			prepare(t, s)
			lookup := func(key string) int {
				t.Helper()
				resp, err := http.Get(s.URL + k.path + "?idempotency_key=" + key)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := lookup("k"); got != http.StatusNotFound {
				t.Fatalf("before any request: %d, want 404", got)
			}
			var wg sync.WaitGroup
			seen := k.counters(s).Requests
			wg.Go(func() { k.create(t, s, "k", "pi_x", 5*time.Second) })
			waitForRequests(t, s, k, seen+1)
			if got := lookup("k"); got != http.StatusConflict {
				t.Fatalf("while processing: %d, want 409", got)
			}
			wg.Wait()
			if got := lookup("k"); got != http.StatusOK {
				t.Fatalf("after the decision: %d, want 200", got)
			}
			k.create(t, s, "r", "refuse_x", 5*time.Second)
			if got := lookup("r"); got != http.StatusNotFound {
				t.Fatalf("after a refusal: %d, want 404", got)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Random faults are reproducible from the seed, and never charge a key twice.
func TestSeededFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	rates := map[sandboxprovider.Fault]float64{sandboxprovider.FaultDrop: 0.3, sandboxprovider.FaultNotCharged: 0.3}
	run := func() (sandboxprovider.Counters, int) {
		s := start(t, sandboxprovider.Config{FaultRates: rates, Seed: 42})
		for i := range 40 {
			key := "k" + string(rune('a'+i%20)) // every key twice
			create(t, s, key, "1", "pi_"+key, 2*time.Second)
		}
		l := s.Ledger()
		return l.Counters, len(l.Charges)
	}
	c1, n1 := run()
	c2, n2 := run()
	if c1.Faults[sandboxprovider.FaultDrop] != c2.Faults[sandboxprovider.FaultDrop] ||
		c1.Faults[sandboxprovider.FaultNotCharged] != c2.Faults[sandboxprovider.FaultNotCharged] || n1 != n2 {
		t.Fatalf("two runs with seed 42 differ: %+v (%d charges) vs %+v (%d)", c1, n1, c2, n2)
	}
	if c1.Faults[sandboxprovider.FaultDrop] == 0 || c1.Faults[sandboxprovider.FaultNotCharged] == 0 {
		t.Fatalf("no faults drawn at 30%% each: %+v", c1)
	}
	if c1.Charges != n1 || n1 > 20 {
		t.Fatalf("charges %d for %d ledger entries over 20 keys", c1.Charges, n1)
	}
}

// The environment's configuration, the calls' faults and the webhooks':
// what parses, and what is refused, naming the variable (and never
// showing the webhook secret).
func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     map[string]string
		wantErr string
		parsed  func(sandboxprovider.Config) bool // when no error is wanted
	}{
		{map[string]string{"SANDBOX_FAULT_RATES": "drop=0.1,busy=0.2", "SANDBOX_FAULT_SEED": "7", "SANDBOX_LATENCY": "5ms"}, "",
			func(c sandboxprovider.Config) bool {
				return c.Seed == 7 && c.FaultRates[sandboxprovider.FaultBusy] == 0.2 && c.Latency == 5*time.Millisecond && c.Webhooks.URL == ""
			}},
		{map[string]string{"SANDBOX_FAULT_RATES": "drop=0.7,busy=0.7"}, "SANDBOX_FAULT_RATES", nil},
		{map[string]string{"SANDBOX_FAULT_RATES": "explode=0.1"}, "SANDBOX_FAULT_RATES", nil},
		{map[string]string{"SANDBOX_LATENCY": "soon"}, "SANDBOX_LATENCY", nil},
		{map[string]string{"SANDBOX_FAULT_SEED": "-1"}, "SANDBOX_FAULT_SEED", nil},
		{map[string]string{"SANDBOX_AUTHORIZATION_TTL": "48h"}, "",
			func(c sandboxprovider.Config) bool { return c.AuthorizationTTL == 48*time.Hour }},
		{map[string]string{"SANDBOX_AUTHORIZATION_TTL": "721h"}, "SANDBOX_AUTHORIZATION_TTL", nil},
		{map[string]string{"SANDBOX_AUTHORIZATION_TTL": "a week"}, "SANDBOX_AUTHORIZATION_TTL", nil},
		{map[string]string{"SANDBOX_WEBHOOK_URL": "http://127.0.0.1:8080/webhooks/sandbox", "SANDBOX_WEBHOOK_SECRET": "whsec_s",
			"SANDBOX_WEBHOOK_RETRY_FOR": "2h", "SANDBOX_WEBHOOK_LATE_DELAY": "40s", "SANDBOX_WEBHOOK_FAULT_RATES": "duplicate=0.1,lost=0.05"}, "",
			func(c sandboxprovider.Config) bool {
				w := c.Webhooks
				return w.Secret == "whsec_s" && w.RetryFor == 2*time.Hour && w.LateDelay == 40*time.Second && w.FaultRates[sandboxprovider.WebhookLost] == 0.05
			}},
		{map[string]string{"SANDBOX_WEBHOOK_URL": "http://127.0.0.1:8080/webhooks/sandbox"}, "SANDBOX_WEBHOOK_SECRET", nil},
		{map[string]string{"SANDBOX_WEBHOOK_SECRET": "whsec_s", "SANDBOX_WEBHOOK_FAULT_RATES": "drop=0.1"}, "SANDBOX_WEBHOOK_FAULT_RATES", nil},
		{map[string]string{"SANDBOX_WEBHOOK_SECRET": "whsec_s", "SANDBOX_WEBHOOK_RETRY_FOR": "100h"}, "SANDBOX_WEBHOOK_RETRY_FOR", nil},
		{map[string]string{}, "", func(c sandboxprovider.Config) bool { return c.Modifications == sandboxprovider.ModificationsAtOnce }},
		{map[string]string{"SANDBOX_MODIFICATIONS": "at-once"}, "",
			func(c sandboxprovider.Config) bool { return c.Modifications == sandboxprovider.ModificationsAtOnce }},
		{map[string]string{"SANDBOX_MODIFICATIONS": "received", "SANDBOX_MODIFICATION_DELAY": "250ms", "SANDBOX_MODIFICATION_FAILURE_RATE": "0.2"}, "",
			func(c sandboxprovider.Config) bool {
				return c.Modifications == sandboxprovider.ModificationsReceived && c.ModificationDelay == 250*time.Millisecond && c.ModificationFailureRate == 0.2
			}},
		{map[string]string{"SANDBOX_MODIFICATIONS": "later"}, "SANDBOX_MODIFICATIONS", nil},
		{map[string]string{"SANDBOX_MODIFICATION_DELAY": "2h"}, "SANDBOX_MODIFICATION_DELAY", nil},
		{map[string]string{"SANDBOX_MODIFICATION_FAILURE_RATE": "1.5"}, "SANDBOX_MODIFICATION_FAILURE_RATE", nil},
	}
	for _, tc := range tests {
		cfg, err := sandboxprovider.ConfigFromEnv(func(k string) string { return tc.env[k] })
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: err %v, want one naming %s", tc.env, err, tc.wantErr)
		case tc.wantErr != "" && strings.Contains(err.Error(), "whsec_s"):
			t.Errorf("%v: the error shows the secret: %v", tc.env, err)
		case tc.wantErr == "" && !tc.parsed(cfg):
			t.Errorf("%v: parsed %+v", tc.env, cfg)
		}
	}
}

// Random faults hit refunds as they hit charges, reproducibly from the
// seed, and never refund a key twice.
func TestSeededFaultsHitRefunds(t *testing.T) {
	t.Parallel()
	rates := map[sandboxprovider.Fault]float64{sandboxprovider.FaultDrop: 0.3, sandboxprovider.FaultNotCharged: 0.3}
	run := func() (sandboxprovider.RefundCounters, sandboxprovider.Ledger) {
		s := start(t, sandboxprovider.Config{FaultRates: rates, Seed: 42})
		for range 50 { // the charge to refund meets the faults too: retry it
			if _, ok := s.Lookup("big"); ok {
				break
			}
			create(t, s, "big", "1000.00", "pi_big", 2*time.Second)
		}
		for i := range 40 {
			key := "r" + string(rune('a'+i%20)) // every key twice
			refund(t, s, key, "big", "1.00", "re_"+key, 2*time.Second)
		}
		l := s.Ledger()
		return l.RefundCounters, l
	}
	c1, l1 := run()
	c2, l2 := run()
	if c1.Faults[sandboxprovider.FaultDrop] != c2.Faults[sandboxprovider.FaultDrop] ||
		c1.Faults[sandboxprovider.FaultNotCharged] != c2.Faults[sandboxprovider.FaultNotCharged] || len(l1.Refunds) != len(l2.Refunds) {
		t.Fatalf("two runs with seed 42 differ: %+v (%d refunds) vs %+v (%d)", c1, len(l1.Refunds), c2, len(l2.Refunds))
	}
	if c1.Faults[sandboxprovider.FaultDrop] == 0 || c1.Faults[sandboxprovider.FaultNotCharged] == 0 {
		t.Fatalf("no faults drawn at 30%% each: %+v", c1)
	}
	refunded, total := l1.Refunded("pi_big")
	if c1.Refunds != len(l1.Refunds) || len(refunded) != c1.Refunds || c1.Refunds > 20 || !total.Equal(decimal.NewFromInt(int64(c1.Refunds))) {
		t.Fatalf("%d refunds counted, %d in the ledger, %d of pi_big totalling %s, over 20 keys of 1.00",
			c1.Refunds, len(l1.Refunds), len(refunded), total)
	}
}

// One key is one refund, as one key is one charge: the same parameters
// replay the first answer, others are refused; the ledger over HTTP says
// what was refunded for which payment, apart from what was charged.
func TestOneKeyIsOneRefund(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{})
	if a := create(t, s, "ck", "100.00", "pi_1", 5*time.Second); a.status != http.StatusOK {
		t.Fatalf("charge: %+v", a)
	}

	first := refund(t, s, "r1", "ck", "30.00", "re_1", 5*time.Second)
	var answer sandboxprovider.RefundAnswer
	if err := json.Unmarshal([]byte(first.body), &answer); err != nil || first.status != http.StatusOK || first.replayed {
		t.Fatalf("first: %+v (%v)", first, err)
	}
	if !strings.HasPrefix(answer.ID, "re_") || answer.IdempotencyKey != "r1" || answer.Status != sandboxprovider.StatusSucceeded ||
		answer.Amount.String() != "30" || answer.Currency != "RUB" || answer.Reference != "re_1" || answer.Charge != "ck" {
		t.Fatalf("answer = %+v", answer)
	}
	again := refund(t, s, "r1", "ck", "30", "re_1", 5*time.Second) // the same amount, written otherwise
	if again.status != http.StatusOK || !again.replayed || again.body != first.body {
		t.Fatalf("replay: %+v, want the first answer, replayed", again)
	}
	other := refund(t, s, "r1", "ck", "31.00", "re_1", 5*time.Second)
	if typ, _ := errorType(t, other); other.status != http.StatusUnprocessableEntity || typ != sandboxprovider.ErrTypeKeyReused {
		t.Fatalf("other amount under the key: %+v, want 422 %s", other, sandboxprovider.ErrTypeKeyReused)
	}
	declined := refund(t, s, "r2", "ck", "5", "decline_1", 5*time.Second)
	if declined.status != http.StatusOK || !strings.Contains(declined.body, `"status":"declined"`) {
		t.Fatalf("decline: %+v", declined)
	}

	ledger, err := sandboxprovider.FetchLedger(context.Background(), s.URL)
	if err != nil {
		t.Fatal(err)
	}
	if c := ledger.RefundCounters; c.Refunds != 1 || c.Declines != 1 || c.Replays != 1 || c.ParamConflicts != 1 || c.Requests != 4 {
		t.Fatalf("refund counters = %+v", c)
	}
	if c := ledger.Counters; c.Charges != 1 || c.Requests != 1 {
		t.Fatalf("charge counters = %+v: refunds are counted apart", c)
	}
	if got, total := ledger.Refunded("pi_1"); len(got) != 1 || total.String() != "30" || got[0].Requests != 2 {
		t.Fatalf("refunded for pi_1 = %+v, total %s", got, total)
	}
	if got := s.RefundsFor("pi_1"); len(got) != 2 {
		t.Fatalf("refunds for pi_1 = %+v, want the succeeded and the declined one", got)
	}
	if _, ok := s.LookupRefund("r1"); !ok {
		t.Fatal("lookup of a refunded key found nothing")
	}
}

// The succeeded refunds of a charge never add up to more than it charged;
// a refund of a charge that did not succeed is refused. A refusal says
// nothing was refunded and records nothing under its key.
func TestRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{})
	create(t, s, "ck", "100.00", "pi_1", 5*time.Second)
	create(t, s, "dk", "50.00", "decline_c", 5*time.Second)
	body := func(charge, amount, currency, ref string) string {
		return `{"charge":"` + charge + `","amount":"` + amount + `","currency":"` + currency + `","reference":"` + ref + `"}`
	}
	tests := []struct {
		name, key, body string
		want            string // the decision, or "refused"
	}{
		{"60 of 100", "a", body("ck", "60.00", "RUB", "re_a"), "succeeded"},
		{"50 more, with 40 left", "b", body("ck", "50.00", "RUB", "re_b"), "refused"},
		{"a declined refund takes nothing", "c", body("ck", "40.00", "RUB", "decline_r"), "declined"},
		{"exactly the 40 left", "d", body("ck", "40.00", "RUB", "re_d"), "succeeded"},
		{"a cent more", "e", body("ck", "0.01", "RUB", "re_e"), "refused"},
		{"a declined charge", "f", body("dk", "1", "RUB", "re_f"), "refused"},
		{"no such charge", "g", body("nope", "1", "RUB", "re_g"), "refused"},
		{"another currency", "h", body("ck", "1", "EUR", "re_h"), "refused"},
	}
	for _, tc := range tests {
		a := post(t, s.URL+"/v1/refunds", tc.key, tc.body, 5*time.Second)
		switch tc.want {
		case "refused":
			if !refusedForGood(t, a) || !strings.Contains(a.body, `"refunded":false`) {
				t.Errorf("%s: %+v, want 422 invalid_request, refunded false", tc.name, a)
			}
			if _, ok := s.LookupRefund(tc.key); ok {
				t.Errorf("%s: the refused refund's key holds a refund", tc.name)
			}
		default:
			if a.status != http.StatusOK || !strings.Contains(a.body, `"status":"`+tc.want+`"`) {
				t.Errorf("%s: %+v, want %s", tc.name, a, tc.want)
			}
		}
	}
	l := s.Ledger()
	if _, total := l.Refunded("pi_1"); total.String() != "100" || l.RefundCounters.Refusals != 5 {
		t.Fatalf("refunded %s of pi_1 with %d refusals, want 100 and 5", total, l.RefundCounters.Refusals)
	}
}

// Refunds processed at the same time cannot together go beyond the
// charge: of 25 refunds of 10.00 of a 100.00 charge, each held in
// processing so that they overlap, exactly 10 are made.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	t.Parallel()
	s := start(t, sandboxprovider.Config{Latency: 100 * time.Millisecond})
	create(t, s, "ck", "100.00", "pi_1", 5*time.Second)
	answers := make([]answer, 25)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			key := fmt.Sprintf("r%02d", i)
			answers[i] = refund(t, s, key, "ck", "10.00", "re_"+key, 5*time.Second)
		})
	}
	wg.Wait()
	made, refused := 0, 0
	for _, a := range answers {
		switch {
		case a.status == http.StatusOK:
			made++
		case refusedForGood(t, a):
			refused++
		default:
			t.Fatalf("answer %+v", a)
		}
	}
	if _, total := s.Ledger().Refunded("pi_1"); made != 10 || refused != 15 || total.String() != "100" {
		t.Fatalf("%d made, %d refused, %s refunded; want 10, 15, 100", made, refused, total)
	}
}
