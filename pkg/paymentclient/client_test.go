package paymentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
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
	paths   []string // method and path
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
	s.bodies = append(s.bodies, string(b))
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
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

const refundCreated = `{"id":3,"paymentId":7,"amount":"10.00","currency":"RUB","paymentProvider":"sandbox","externalRefundId":"re_1","status":"SUCCEEDED"}`

var refundReq = RefundRequest{Amount: "10.00", ExternalRefundID: "re_1"}

// operations are the client's money-moving calls: each follows the same
// retry discipline, so the tests below run each of them.
var operations = []struct {
	name    string
	path    string // the request's method and path
	created string // the service's 201 body
	call    func(ctx context.Context, c *Client, key string) (answered, error)
}{
	{"charge", "POST /payments", created, func(ctx context.Context, c *Client, key string) (answered, error) {
		res, err := c.Charge(ctx, key, req)
		if err == nil && (res.Payment.ID != 7 || res.Payment.Status != "SUCCEEDED") {
			return answered{}, errors.New("charge answered, but not with payment 7 SUCCEEDED")
		}
		return answered{created: res.Created, replayed: res.Replayed, attempts: res.Attempts}, err
	}},
	{"refund", "POST /payments/7/refunds", refundCreated, func(ctx context.Context, c *Client, key string) (answered, error) {
		res, err := c.Refund(ctx, key, 7, refundReq)
		if err == nil && (res.Refund.ID != 3 || res.Refund.PaymentID != 7 || res.Refund.Status != "SUCCEEDED") {
			return answered{}, errors.New("refund answered, but not with refund 3 of payment 7 SUCCEEDED")
		}
		return answered{created: res.Created, replayed: res.Replayed, attempts: res.Attempts}, err
	}},
}

// A charge's payment method is sent as paymentMethod when it is set, and
// left out when it is not: a body without it hashes as it always did.
func TestPaymentMethodIsSentOnlyWhenSet(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method string
		want   string // in the body; "" when it must not be there
	}{
		{"pm_card_visa", `"paymentMethod":"pm_card_visa"`},
		{"", ""},
	} {
		s := &script{replies: []reply{{status: 201, body: created}}}
		c, _ := newTestClient(t, s, RetryPolicy{})
		r := req
		r.PaymentMethod = tc.method
		if _, err := c.Charge(context.Background(), "k-"+tc.method, r); err != nil {
			t.Fatal(err)
		}
		body := s.bodies[0]
		if tc.want != "" && !strings.Contains(body, tc.want) || tc.want == "" && strings.Contains(body, "paymentMethod") {
			t.Errorf("payment method %q: the body is %s", tc.method, body)
		}
	}
}

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
// waiting what Retry-After says (a backoff when there is none), until the
// final answer.
func TestRetriesWhatIsSafeWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	for _, op := range operations {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			testRetriesWhatIsSafe(t, op.path, op.created, op.call)
		})
	}
}

func testRetriesWhatIsSafe(t *testing.T, path, success string, call func(context.Context, *Client, string) (answered, error)) {
	s := &script{replies: []reply{
		{hangUp: true},
		{status: 503, body: problem(503, codeOutcomeUnknown), retryAfter: 1},
		{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 3},
		{status: 503, body: problem(503, codeServiceUnavailable), retryAfter: 2},
		{status: 503, body: problem(503, codeProviderUnavailable), retryAfter: 2},
		{status: 201, body: success},
	}}
	c, waits := newTestClient(t, s, RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond})
	res, err := call(context.Background(), c, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	if !res.created || res.replayed || res.attempts != 6 {
		t.Fatalf("result %+v", res)
	}
	for i := range s.keys {
		if s.keys[i] != "op-1" || s.bodies[i] != s.bodies[0] || s.paths[i] != path {
			t.Fatalf("attempt %d sent %s key %q body %s; want %s with the first attempt's key and body", i+1, s.paths[i], s.keys[i], s.bodies[i], path)
		}
	}
	// Backoff (no jitter: half of 100 ms) with no answer, Retry-After
	// after every answer that names one.
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

// The service's Retry-After is followed, not taken as a floor: a second
// while the attempt holding the key may answer any moment means a second,
// however long the backoff has grown, so the client learns the answer
// when it is known.
func TestFollowsRetryAfterEvenWhenTheBackoffIsLonger(t *testing.T) {
	t.Parallel()
	s := &script{replies: []reply{
		{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 1},
		{status: 409, body: problem(409, codeRequestInProgress), retryAfter: 1},
		{status: 503, body: problem(503, codeOutcomeUnknown), retryAfter: 1},
		{status: 201, body: operations[0].created},
	}}
	c, waits := newTestClient(t, s, RetryPolicy{InitialBackoff: 2 * time.Second, MaxBackoff: 8 * time.Second})
	if _, err := operations[0].call(context.Background(), c, "op-follow"); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, time.Second, time.Second}
	if fmt.Sprint(*waits) != fmt.Sprint(want) {
		t.Fatalf("waits %v, want %v: what Retry-After said, not the backoff (1 s, 2 s, 4 s)", *waits, want)
	}
}

// Every other answer is final: one request, and an error to switch on.
func TestNeverRetriesOtherAnswers(t *testing.T) {
	t.Parallel()
	declined := `{"type":"x","title":"t","status":402,"code":"payment-declined","payment":{"id":9,"status":"DECLINED"}}`
	validation := `{"type":"x","title":"t","status":400,"code":"validation-failed","errors":[{"field":"amount","message":"is required"}]}`
	charge, refund := operations[0], operations[1]
	type final struct {
		name  string
		reply reply
		is    error
	}
	tests := []final{
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
	// A refund's final answers, by status and code: its own problems, and
	// the ones it shares with a charge. refund-exceeds-payment is among
	// them: the same call may succeed once a refund in progress is
	// declined, but that is nothing this client can wait for.
	refundFinals := map[string]error{
		"422 " + codeRefundDeclined:         ErrRefundDeclined,
		"422 " + codeRefundFailed:           ErrRefundFailed,
		"409 " + codeRefundExceedsPayment:   ErrRefundExceedsPayment,
		"409 " + codePaymentNotRefundable:   ErrPaymentNotRefundable,
		"404 " + codePaymentNotFound:        ErrPaymentNotFound,
		"409 " + codeExternalRefundConflict: ErrExternalRefundConflict,
		"409 " + codeKeyReused:              ErrKeyReused,
		"400 validation-failed":             ErrValidation,
		"401 unauthorized":                  ErrUnauthorized,
		"500 internal-error":                nil,
	}
	var refundTests []final
	for answer, is := range refundFinals {
		status, code, _ := strings.Cut(answer, " ")
		n, _ := strconv.Atoi(status)
		refundTests = append(refundTests, final{answer, reply{status: n, body: problem(n, code)}, is})
	}
	every := []error{ErrDeclined, ErrPaymentFailed, ErrKeyReused, ErrOrderAlreadyPaid, ErrExternalPaymentConflict, ErrUnauthorized,
		ErrOrderNotFound, ErrOrderMismatch, ErrOutcomeUnknown, ErrPaymentNotFound, ErrPaymentNotRefundable, ErrRefundExceedsPayment,
		ErrRefundDeclined, ErrRefundFailed, ErrExternalRefundConflict}
	for i, table := range [][]final{tests, refundTests} {
		op := operations[i]
		for _, tc := range table {
			t.Run(op.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := &script{replies: []reply{tc.reply, {status: 201, body: op.created}}}
				c, _ := newTestClient(t, s, RetryPolicy{})
				_, err := op.call(context.Background(), c, "op")
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
				for _, other := range every {
					if other != tc.is && errors.Is(err, other) { //nolint:errorlint // which sentinel other is, not an error returned
						t.Fatalf("err %v is also %v", err, other)
					}
				}
			})
		}
	}
	t.Run("the declined payment, the declined refund and the invalid fields are there", func(t *testing.T) {
		t.Parallel()
		s := &script{replies: []reply{{status: 402, body: declined}}}
		c, _ := newTestClient(t, s, RetryPolicy{})
		_, err := charge.call(context.Background(), c, "op")
		var d *DeclinedError
		if !errors.As(err, &d) || d.Payment.ID != 9 || d.Payment.Status != "DECLINED" {
			t.Fatalf("err %v, want a DeclinedError with payment 9", err)
		}
		s = &script{replies: []reply{{status: 422, body: `{"type":"x","title":"t","status":422,"code":"refund-declined","refund":{"id":3,"paymentId":7,"status":"DECLINED"}}`}}}
		c, _ = newTestClient(t, s, RetryPolicy{})
		_, err = refund.call(context.Background(), c, "op")
		var p *Problem
		if !errors.As(err, &p) || p.Refund == nil || p.Refund.ID != 3 || p.Refund.Status != "DECLINED" {
			t.Fatalf("err %v, want a Problem with refund 3 DECLINED", err)
		}
		s = &script{replies: []reply{{status: 400, body: validation}}}
		c, _ = newTestClient(t, s, RetryPolicy{})
		_, err = charge.call(context.Background(), c, "op")
		if !errors.As(err, &p) || len(p.Errors) != 1 || p.Errors[0].Field != "amount" {
			t.Fatalf("err %v, want the field amount named", err)
		}
	})
}

// Giving up says whether the money may have moved.
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
	for _, op := range operations {
		for _, tc := range tests {
			t.Run(op.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := &script{replies: tc.replies}
				c, _ := newTestClient(t, s, RetryPolicy{MaxAttempts: 4})
				_, err := op.call(context.Background(), c, "op")
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
}

// Listing refunds is a read: it is retried on what a command is retried on,
// with no key, and giving up on it never says the money may have moved.
func TestListingRefundsRetriesAndNeverLeavesAnOutcomeUnknown(t *testing.T) {
	t.Parallel()
	list := `{"refunds":[` + refundCreated + `]}`
	s := &script{replies: []reply{{hangUp: true}, {status: 502, body: "bad gateway"}, {status: 200, body: list}}}
	c, _ := newTestClient(t, s, RetryPolicy{})
	refunds, err := c.Refunds(context.Background(), 7)
	if err != nil || len(refunds) != 1 || refunds[0].ID != 3 || refunds[0].Amount != "10.00" || s.requests() != 3 {
		t.Fatalf("Refunds = %+v, %v after %d requests; want refund 3 after 3", refunds, err, s.requests())
	}
	for i := range s.paths {
		if s.paths[i] != "GET /payments/7/refunds" || s.keys[i] != "" {
			t.Fatalf("request %d: %s with key %q; want GET /payments/7/refunds without a key", i+1, s.paths[i], s.keys[i])
		}
	}
	s = &script{replies: []reply{{hangUp: true}}}
	c, _ = newTestClient(t, s, RetryPolicy{MaxAttempts: 2})
	_, err = c.Refunds(context.Background(), 7)
	var g *GaveUpError
	if !errors.As(err, &g) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err %v; want a GaveUpError that is not ErrOutcomeUnknown", err)
	}
	s = &script{replies: []reply{{status: 404, body: problem(404, codePaymentNotFound)}}}
	c, _ = newTestClient(t, s, RetryPolicy{})
	if _, err = c.Refunds(context.Background(), 7); !errors.Is(err, ErrPaymentNotFound) || s.requests() != 1 {
		t.Fatalf("err %v after %d requests; want ErrPaymentNotFound after one", err, s.requests())
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
	for _, op := range operations {
		if _, err := op.call(context.Background(), c, ""); err == nil || s.requests() != 1 {
			t.Fatalf("a %s without a key: err %v, %d requests; want an error and nothing sent", op.name, err, s.requests())
		}
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
