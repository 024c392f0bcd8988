package paymentclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The service's end is scripted here; test/fault's client tests run the
// same client against the real service through lossy links.

type reply struct {
	status     int
	body       string
	retryAfter int
	hangUp     bool // close the connection without an answer
}

// script serves the replies in order (the last one again and again) and
// records every request's key and body.
type script struct {
	mu      sync.Mutex
	replies []reply
	keys    []string
	bodies  []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.bodies = append(s.bodies, string(b))
	rp := s.replies[min(len(s.keys), len(s.replies))-1]
	s.mu.Unlock()
	if rp.hangUp {
		panic(http.ErrAbortHandler)
	}
	if rp.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rp.retryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

func (s *script) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func problem(status int, code string) string {
	return `{"type":"https://payment-service.example/problems/` + code + `","title":"t","status":` + strconv.Itoa(status) + `,"code":"` + code + `"}`
}

const created = `{"id":7,"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","status":"SUCCEEDED","createdAt":"2026-12-01T10:00:00Z"}`

var req = ChargeRequest{OrderID: 1001, CustomerID: 42, Amount: "100.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: "pi_1"}

// newTestClient returns a client of the scripted server that records its
// waits instead of sleeping, with no jitter.
func newTestClient(t *testing.T, s *script, policy RetryPolicy) (*Client, *[]time.Duration) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL, APIKey: "k", Retry: policy})
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	c.jitter = func(time.Duration) time.Duration { return 0 }
	return c, &waits
}

// What is safe is retried, with the same key and the same body every time,
// waiting at least Retry-After, until the final answer.
func TestRetriesWhatIsSafeWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	s := &script{replies: []reply{
		{hangUp: true},
		{status: 503, body: problem(503, codeOutcomeUnknown), retryAfter: 1},
		{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 3},
		{status: 503, body: problem(503, codeServiceUnavailable), retryAfter: 2},
		{status: 503, body: problem(503, codeProviderUnavailable), retryAfter: 2},
		{status: 201, body: created},
	}}
	c, waits := newTestClient(t, s, RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond})
	res, err := c.Charge(context.Background(), "op-1", req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Payment.ID != 7 || res.Payment.Status != "SUCCEEDED" || res.Attempts != 6 {
		t.Fatalf("result %+v", res)
	}
	for i := range s.keys {
		if s.keys[i] != "op-1" || s.bodies[i] != s.bodies[0] {
			t.Fatalf("attempt %d sent key %q body %s; want the first attempt's key and body", i+1, s.keys[i], s.bodies[i])
		}
	}
	// Backoff (no jitter: half of 100, 200, 400, 400, 400 ms) or
	// Retry-After, whichever is longer.
	want := []time.Duration{50 * time.Millisecond, time.Second, 3 * time.Second, 2 * time.Second, 2 * time.Second}
	if len(*waits) != len(want) {
		t.Fatalf("waits %v, want %v", *waits, want)
	}
	for i := range want {
		if (*waits)[i] != want[i] {
			t.Fatalf("waits %v, want %v", *waits, want)
		}
	}
}

// Every other answer is final: one request, and an error to switch on.
func TestNeverRetriesOtherAnswers(t *testing.T) {
	t.Parallel()
	declined := `{"type":"x","title":"t","status":402,"code":"payment-declined","payment":{"id":9,"status":"DECLINED"}}`
	validation := `{"type":"x","title":"t","status":400,"code":"validation-failed","errors":[{"field":"amount","message":"is required"}]}`
	tests := []struct {
		name  string
		reply reply
		is    error
	}{
		{"declined", reply{status: 402, body: declined}, ErrDeclined},
		{"failed", reply{status: 402, body: problem(402, codePaymentFailed)}, ErrPaymentFailed},
		{"key reused", reply{status: 409, body: problem(409, codeKeyReused)}, ErrKeyReused},
		{"order already paid", reply{status: 409, body: problem(409, codeOrderAlreadyPaid)}, ErrOrderAlreadyPaid},
		{"external payment conflict", reply{status: 409, body: problem(409, codeExternalPaymentConflict)}, ErrExternalPaymentConflict},
		{"validation", reply{status: 400, body: validation}, ErrValidation},
		{"unauthorized", reply{status: 401, body: problem(401, "unauthorized")}, ErrUnauthorized},
		{"order not found", reply{status: 422, body: problem(422, codeOrderNotFound)}, ErrOrderNotFound},
		{"order mismatch", reply{status: 422, body: problem(422, codeOrderMismatch)}, ErrOrderMismatch},
		{"the service's own internal error", reply{status: 500, body: problem(500, "internal-error")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &script{replies: []reply{tc.reply, {status: 201, body: created}}}
			c, _ := newTestClient(t, s, RetryPolicy{})
			_, err := c.Charge(context.Background(), "op", req)
			if err == nil || s.requests() != 1 {
				t.Fatalf("err %v after %d requests; want an error after one", err, s.requests())
			}
			var p *Problem
			if !errors.As(err, &p) || p.Status != tc.reply.status {
				t.Fatalf("err %v is not the %d problem", err, tc.reply.status)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err %v is not %v", err, tc.is)
			}
			for _, other := range []error{ErrDeclined, ErrPaymentFailed, ErrKeyReused, ErrOrderAlreadyPaid, ErrExternalPaymentConflict, ErrUnauthorized, ErrOrderNotFound, ErrOutcomeUnknown} {
				if other != tc.is && errors.Is(err, other) {
					t.Fatalf("err %v is also %v", err, other)
				}
			}
		})
	}
	t.Run("the declined payment and the invalid fields are there", func(t *testing.T) {
		t.Parallel()
		s := &script{replies: []reply{{status: 402, body: declined}}}
		c, _ := newTestClient(t, s, RetryPolicy{})
		_, err := c.Charge(context.Background(), "op", req)
		var d *DeclinedError
		if !errors.As(err, &d) || d.Payment.ID != 9 || d.Payment.Status != "DECLINED" {
			t.Fatalf("err %v, want a DeclinedError with payment 9", err)
		}
		s = &script{replies: []reply{{status: 400, body: validation}}}
		c, _ = newTestClient(t, s, RetryPolicy{})
		_, err = c.Charge(context.Background(), "op", req)
		var p *Problem
		if !errors.As(err, &p) || len(p.Errors) != 1 || p.Errors[0].Field != "amount" {
			t.Fatalf("err %v, want the field amount named", err)
		}
	})
}

// Giving up says whether the charge may have been made.
func TestGivingUpSaysWhetherTheOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replies []reply
		unknown bool
	}{
		{"outcome unknown", []reply{{status: 503, body: problem(503, codeOutcomeUnknown), retryAfter: 1}}, true},
		{"no answer", []reply{{hangUp: true}}, true},
		{"in progress", []reply{{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 1}}, true},
		{"database down throughout", []reply{{status: 503, body: problem(503, codeServiceUnavailable), retryAfter: 1}}, false},
		{"unknown, then database down", []reply{{hangUp: true}, {status: 503, body: problem(503, codeServiceUnavailable), retryAfter: 1}}, true},
		// A gateway's answer in the service's place: the service may have
		// charged behind it (gateway_test.go runs this through a real
		// proxy in front of the real service).
		{"a gateway's 502", []reply{{status: 502, body: "<html>bad gateway</html>"}}, true},
		{"a gateway's 504", []reply{{status: 504, body: ""}}, true},
		{"a gateway's 500 page", []reply{{status: 500, body: "<html>internal error</html>"}}, true},
		{"a gateway's 503 page", []reply{{status: 503, body: "no healthy upstream"}}, true},
		{"a gateway's 502 with JSON that looks like the service's", []reply{{status: 502, body: problem(503, codeServiceUnavailable)}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &script{replies: tc.replies}
			c, _ := newTestClient(t, s, RetryPolicy{MaxAttempts: 4})
			_, err := c.Charge(context.Background(), "op", req)
			var g *GaveUpError
			if !errors.As(err, &g) || g.Attempts != 4 || s.requests() != 4 {
				t.Fatalf("err %v after %d requests; want a GaveUpError after 4", err, s.requests())
			}
			if errors.Is(err, ErrOutcomeUnknown) != tc.unknown {
				t.Fatalf("errors.Is(%v, ErrOutcomeUnknown) = %v, want %v", err, !tc.unknown, tc.unknown)
			}
		})
	}
}

// The caller's context bounds the whole operation: a deadline sooner than
// the next wait ends it at once, not after a sleep into the deadline.
func TestTheCallersContextBoundsTheRetries(t *testing.T) {
	t.Parallel()
	s := &script{replies: []reply{{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 30}}}
	c, _ := newTestClient(t, s, RetryPolicy{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Charge(ctx, "op", req)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err %v, want DeadlineExceeded and ErrOutcomeUnknown", err)
	}
	if time.Since(start) > time.Second || s.requests() != 1 {
		t.Fatalf("took %s and %d requests; want one request and no wait", time.Since(start), s.requests())
	}
	if _, err := c.Charge(context.Background(), "", req); err == nil {
		t.Fatal("a charge without a key was sent")
	}
}

// The backoff doubles up to its cap, and the jitter spreads it over
// [half, whole].
func TestBackoffIsCappedAndJittered(t *testing.T) {
	t.Parallel()
	c, err := New(Config{BaseURL: "http://127.0.0.1:1", APIKey: "k", Retry: RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 12; n++ {
		step := min(100*time.Millisecond<<(n-1), time.Second)
		for range 50 {
			if d := c.backoff(n); d < step/2 || d > step {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, d, step/2, step)
			}
		}
	}
}

func TestNewIdempotencyKey(t *testing.T) {
	t.Parallel()
	uuidV4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		k := NewIdempotencyKey()
		if !uuidV4.MatchString(k) || seen[k] {
			t.Fatalf("key %q: not a fresh UUID v4", k)
		}
		seen[k] = true
	}
}
