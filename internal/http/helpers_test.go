package http_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	demoKey  = "demo-secret"
	otherKey = "other-secret"
)

// testService is the real service, on a loopback port, over its own fresh
// database, charging through its own sandbox provider, which runs as an
// HTTP server on another loopback port. Tests talk to the service over real
// HTTP, look at the database, and count charges in the provider's ledger.
type testService struct {
	url      string
	db       *pgxpool.Pool
	provider *sandboxprovider.Server
}

// startService runs the service with env over the defaults below, and a
// sandbox provider that answers at once.
func startService(t testing.TB, env map[string]string) *testService {
	t.Helper()
	return startServiceWith(t, testdb.New(t), env, sandboxprovider.Config{})
}

// startOption changes how startServiceWith runs the service.
type startOption func(*startOptions)

type startOptions struct {
	service []service.Option
	logs    io.Writer // the service's log; discarded if nil
}

// startServiceWith runs the service on dsn against a sandbox provider
// configured by provider.
func startServiceWith(t testing.TB, dsn string, env map[string]string, provider sandboxprovider.Config, opts ...startOption) *testService {
	t.Helper()
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	s := servicetest.Start(t, servicetest.Options{DSN: dsn, Env: env, Provider: provider, Logs: o.logs, Service: o.service})
	// Before the service stops and its pool closes (cleanups run last
	// first): every event the test made it write keeps the contract.
	t.Cleanup(func() { checkOutboxContract(t, s.DB) })
	return &testService{url: s.URL, db: s.DB, provider: s.Provider}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// request sends one request with the demo client's key unless headers say
// otherwise (an explicit "Authorization": "" removes it).
func (s *testService) request(t testing.TB, method, path, body string, headers map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+demoKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// charge posts a charge with an idempotency key.
func (s *testService) charge(t testing.TB, key, body string) response {
	t.Helper()
	return s.request(t, http.MethodPost, "/payments", body, map[string]string{"Idempotency-Key": key})
}

// addOrder puts an order into the projection the charge is checked against.
func (s *testService) addOrder(t testing.TB, id, customer int64, amount, currency string) {
	t.Helper()
	_, err := s.db.Exec(context.Background(),
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4)`,
		id, customer, amount, currency)
	if err != nil {
		t.Fatal(err)
	}
}

// count runs a SELECT count(*) ... and returns the number.
func (s *testService) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// metric reads one sample from /metrics, 0 if absent. name includes the
// labels as Prometheus prints them, e.g.
// payment_provider_calls_total{outcome="approved",provider="sandbox"}.
func (s *testService) metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return 0
}

// ledger reads the sandbox provider's ledger over HTTP: what was really
// charged, the ground truth for "never twice, never lost".
func (s *testService) ledger(t testing.TB) sandboxprovider.Ledger {
	t.Helper()
	l, err := sandboxprovider.FetchLedger(context.Background(), s.provider.URL)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// providerCalls is the total of payment_provider_calls_total for the sandbox.
func (s *testService) providerCalls(t testing.TB) float64 {
	t.Helper()
	var total float64
	for _, outcome := range []string{"approved", "declined", "not_charged", "unknown"} {
		total += s.metric(t, `payment_provider_calls_total{outcome="`+outcome+`",provider="sandbox"}`)
	}
	return total
}

// withPaymentMethod is a charge body with paymentMethod set to the JSON
// value pm.
func withPaymentMethod(body, pm string) string {
	return strings.TrimSuffix(body, "}") + `,"paymentMethod":` + pm + "}"
}

func chargeBody(order, customer int64, amount, currency, external string) string {
	return `{"orderId":` + strconv.FormatInt(order, 10) +
		`,"customerId":` + strconv.FormatInt(customer, 10) +
		`,"amount":"` + amount + `","currency":"` + currency +
		`","paymentProvider":"sandbox","externalPaymentId":"` + external + `"}`
}
