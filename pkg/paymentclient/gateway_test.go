package paymentclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
	"github.com/example/payment-service/pkg/paymentclient"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// gateway is a reverse proxy in front of the real service that forwards
// every request, lets the service process it, and then, for the first
// `fail` requests, drops the service's answer and answers `status` with a
// page of its own, as a load balancer does when the upstream's answer does
// not reach it in time. It records the key of every request it forwarded.
type gateway struct {
	mu     sync.Mutex
	fail   int // how many answers to replace; -1: all of them
	status int
	keys   []string
}

func (g *gateway) start(t *testing.T, upstream string) string {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.keys = append(g.keys, resp.Request.Header.Get("Idempotency-Key"))
		if g.fail >= 0 && len(g.keys) > g.fail {
			return nil
		}
		// The service has answered; the answer is lost on the way back.
		_, _ = io.Copy(io.Discard, resp.Body)
		return errLostUpstreamAnswer
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(g.status)
		_, _ = io.WriteString(w, "<html><body><h1>"+http.StatusText(g.status)+"</h1>upstream answer lost</body></html>")
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

var errLostUpstreamAnswer = errors.New("upstream answer lost")

func (g *gateway) forwarded() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

// A gateway's 502, 504 or 500 page after the service charged is no answer:
// the client retries with the same key, and a retry that gets through
// replays the stored payment; when the budget runs out first, the error is
// ErrOutcomeUnknown, never a final answer that would invite a new key. The
// provider charged once either way.
func TestAGatewaysAnswerAfterTheChargeIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		fail   int // answers the gateway replaces; -1: all
	}{
		{"502, then the retry gets through", http.StatusBadGateway, 1},
		{"504 twice, then the retry gets through", http.StatusGatewayTimeout, 2},
		{"a gateway's 500 page, then the retry gets through", http.StatusInternalServerError, 1},
		{"a gateway's 503 page, then the retry gets through", http.StatusServiceUnavailable, 1},
		{"502 until the budget runs out", http.StatusBadGateway, -1},
		{"504 until the budget runs out", http.StatusGatewayTimeout, -1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t)})
			ctx := context.Background()
			if _, err := svc.DB.Exec(ctx, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`); err != nil {
				t.Fatal(err)
			}
			g := &gateway{fail: tc.fail, status: tc.status}
			const maxAttempts = 3
			client, err := paymentclient.New(paymentclient.Config{BaseURL: g.start(t, svc.URL), APIKey: "demo-secret",
				Retry: paymentclient.RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: maxAttempts}})
			if err != nil {
				t.Fatal(err)
			}
			key := paymentclient.NewIdempotencyKey()
			external := "pi_gateway_" + string(rune('a'+i))
			req := paymentclient.ChargeRequest{OrderID: 1001, CustomerID: 42, Amount: "100.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: external}

			res, err := client.Charge(ctx, key, req)

			keys := g.forwarded()
			for _, k := range keys {
				if k != key {
					t.Fatalf("the gateway forwarded keys %v; every attempt must send %q", keys, key)
				}
			}
			if tc.fail >= 0 {
				if err != nil {
					t.Fatalf("Charge = %v; want the payment the retry replays", err)
				}
				if !res.Replayed || !res.Created || res.Payment.Status != "SUCCEEDED" || res.Attempts != tc.fail+1 || len(keys) != tc.fail+1 {
					t.Fatalf("result %+v after %d forwarded requests; want the stored 201 replayed on attempt %d", res, len(keys), tc.fail+1)
				}
			} else {
				var gaveUp *paymentclient.GaveUpError
				if !errors.Is(err, paymentclient.ErrOutcomeUnknown) || !errors.As(err, &gaveUp) || gaveUp.Attempts != maxAttempts || len(keys) != maxAttempts {
					t.Fatalf("Charge = %v after %d forwarded requests; want ErrOutcomeUnknown after %d", err, len(keys), maxAttempts)
				}
				var p *paymentclient.Problem
				if !errors.As(err, &p) || p.Status != tc.status {
					t.Fatalf("Charge = %v; want the gateway's %d as the last attempt's error", err, tc.status)
				}
				// What the package docs say to do next: the same call,
				// later, which learns the outcome the gateway hid.
				direct, err := paymentclient.New(paymentclient.Config{BaseURL: svc.URL, APIKey: "demo-secret"})
				if err != nil {
					t.Fatal(err)
				}
				res, err = direct.Charge(ctx, key, req)
				if err != nil || !res.Replayed || res.Payment.Status != "SUCCEEDED" {
					t.Fatalf("the same call later = %+v, %v; want the stored payment replayed", res, err)
				}
			}

			if got := len(svc.Provider.Ledger().Succeeded(external)); got != 1 {
				t.Errorf("charges at the provider = %d, want 1", got)
			}
			var payments int
			if err := svc.DB.QueryRow(ctx, `SELECT count(*) FROM payment WHERE order_id = 1001 AND status = 'SUCCEEDED'`).Scan(&payments); err != nil {
				t.Fatal(err)
			}
			if payments != 1 {
				t.Errorf("succeeded payments for the order = %d, want 1", payments)
			}
		})
	}
}
