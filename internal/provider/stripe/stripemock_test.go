package stripe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// startStripeMock returns the HTTP base URL of a stripe-mock: the one
// STRIPE_MOCK_URL names, already running (make test-stripe-mock starts it,
// scripts/stripe-mock.sh, and stops it after), or else one the test runs
// itself: stripe-mock, the tool dependency in go.mod, with both its HTTP
// and HTTPS listeners on loopback ports the system picks (-http-addr alone
// would open HTTPS on every interface), stopped when t ends. The test does
// not skip without it: go tool -n builds it from the module cache and
// names the binary, which the test runs itself, since stopping go tool
// would leave the tool it started running.
func startStripeMock(t *testing.T) string {
	t.Helper()
	if running := os.Getenv("STRIPE_MOCK_URL"); running != "" {
		t.Logf("stripe-mock at %s (STRIPE_MOCK_URL)", running)
		return strings.TrimRight(running, "/")
	}
	built, err := exec.Command("go", "tool", "-n", "stripe-mock").Output()
	if err != nil {
		t.Fatalf("go tool -n stripe-mock: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(built)), "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("stripe-mock: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	listening := regexp.MustCompile(`Listening for HTTP at address: (127\.0\.0\.1:\d+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			t.Fatalf("stripe-mock stopped before it listened: %s", stderr.String())
		}
		return "http://" + addr
	case <-time.After(time.Minute):
		t.Fatalf("stripe-mock did not listen within a minute: %s", stderr.String())
		return ""
	}
}

// exchange is one request the adapter sent and stripe-mock's answer.
type exchange struct {
	method, path string
	status       int
	body         []byte
}

// recorder stands between the adapter and stripe-mock and keeps every
// exchange.
type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
}

func (r *recorder) proxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		defer r.mu.Unlock()
		r.exchanges = append(r.exchanges, exchange{method: resp.Request.Method, path: resp.Request.URL.Path, status: resp.StatusCode, body: body})
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Every request the adapter sends is accepted by stripe-mock, which checks
// it against Stripe's OpenAPI document, and every answer decodes into
// stripe-go's types. stripe-mock keeps no state and answers fixtures, so
// this proves shapes, not behaviour (the fake, internal/stripefake, is for
// behaviour): the fixtures describe no request of ours, and the adapter
// sorts them as unknown, or finds no PaymentIntent of ours.
func TestStripeMockTakesEveryRequestTheAdapterSends(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	c, err := New(Config{SecretKey: "sk_test_123", APIBase: rec.proxy(t, startStripeMock(t)), ConnectTimeout: time.Second, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	amount, err := domain.NewMoney(decimal.RequireFromString("10.50"), "EUR")
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(1, 1, amount, Name, "pi_mock")
	if err != nil {
		t.Fatal(err)
	}
	charge.PaymentMethod = "pm_card_visa"
	req := app.ProviderCharge{IdempotencyKey: charge.ProviderIdempotencyKey(), Charge: charge, ReservedAt: time.Now()}
	manual := req
	manual.Charge.CaptureMethod = domain.CaptureManual
	p := domain.Payment{ID: 1, Charge: charge, Status: domain.PaymentSucceeded, CreatedAt: req.ReservedAt}
	refund, err := domain.NewRefund(p, amount, "re_mock")
	if err != nil {
		t.Fatal(err)
	}
	refundReq := app.ProviderRefund{IdempotencyKey: refund.ProviderIdempotencyKey(), PaymentKey: req.IdempotencyKey, PaymentReservedAt: req.ReservedAt, Refund: refund}
	captureReq := app.ProviderCapture{IdempotencyKey: req.IdempotencyKey + ":capture:cp", AuthorizationKey: req.IdempotencyKey,
		AuthorizationReservedAt: req.ReservedAt, Amount: amount, Reference: "cp"}
	voidReq := app.ProviderVoid{IdempotencyKey: req.IdempotencyKey + ":void", AuthorizationKey: req.IdempotencyKey, AuthorizationReservedAt: req.ReservedAt}
	// The modifications' POSTs go to the PaymentIntent stripe-mock's
	// fixtures name, since locate finds none of ours there.
	pi := &stripego.PaymentIntent{ID: "pi_123"}
	calls := []struct {
		name string
		call func() (any, error)
		want []string // the requests it sends: method and path
	}{
		{"charge", func() (any, error) { return c.Charge(ctx, req) }, []string{"POST /v1/payment_intents"}},
		{"authorize", func() (any, error) { return c.Authorize(ctx, manual) }, []string{"POST /v1/payment_intents"}},
		{"lookup a charge", func() (any, error) { return c.LookupCharge(ctx, req) }, []string{"GET /v1/payment_intents"}},
		{"locate a PaymentIntent", func() (any, error) { return c.locate(ctx, req.IdempotencyKey, req.ReservedAt) },
			[]string{"GET /v1/payment_intents", "GET /v1/payment_intents/search", "GET /v1/payment_intents/{id}"}},
		{"capture", func() (any, error) { return c.capture(ctx, pi, captureReq, captureReq.IdempotencyKey, 1050, "eur") },
			[]string{"POST /v1/payment_intents/{id}/capture"}},
		{"void", func() (any, error) { return c.cancel(ctx, pi, voidReq) }, []string{"POST /v1/payment_intents/{id}/cancel"}},
		{"refund", func() (any, error) { return c.refund(ctx, pi, refundReq, refundReq.IdempotencyKey, 1050, "eur") }, []string{"POST /v1/refunds"}},
		{"lookup a refund", func() (any, error) { return c.refundOf(ctx, pi, refundReq) }, []string{"GET /v1/refunds"}},
	}
	for _, tc := range calls {
		rec.mu.Lock()
		rec.exchanges = nil
		rec.mu.Unlock()
		_, callErr := tc.call()
		rec.mu.Lock()
		got := rec.exchanges
		rec.mu.Unlock()
		var sent []string
		for _, e := range got {
			sent = append(sent, e.method+" "+anID.ReplaceAllString(e.path, "/{id}"))
			if e.status != http.StatusOK {
				t.Errorf("%s: stripe-mock refused %s %s with %d: %s", tc.name, e.method, e.path, e.status, e.body)
				continue
			}
			decodes(t, tc.name, e)
		}
		if strings.Join(sent, ", ") != strings.Join(tc.want, ", ") {
			t.Errorf("%s sent %v, want %v (the call answered %v)", tc.name, sent, tc.want, callErr)
		}
		if callErr != nil && strings.Contains(callErr.Error(), "deserialize") {
			t.Errorf("%s: stripe-go could not read stripe-mock's answer: %v", tc.name, callErr)
		}
	}
}

// anID is an object's id in a path.
var anID = regexp.MustCompile(`/pi_[A-Za-z0-9]+`)

// decodes fails t unless e's body reads as stripe-go's type for its path.
func decodes(t *testing.T, name string, e exchange) {
	t.Helper()
	var v any
	switch {
	case e.path == "/v1/refunds" && e.method == http.MethodPost:
		v = &stripego.Refund{}
	case e.path == "/v1/refunds":
		v = &stripego.RefundList{}
	case e.path == "/v1/payment_intents" && e.method == http.MethodGet:
		v = &stripego.PaymentIntentList{}
	case e.path == "/v1/payment_intents/search":
		v = &stripego.PaymentIntentSearchResult{}
	default:
		v = &stripego.PaymentIntent{}
	}
	if err := json.Unmarshal(e.body, v); err != nil {
		t.Errorf("%s: %s %s answered what stripe-go cannot read: %v", name, e.method, e.path, err)
	}
}
