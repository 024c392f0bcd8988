package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/testdb"
)

// TestMain gives the tests that run the real service (refund_test.go) a
// PostgreSQL server.
func TestMain(m *testing.M) { testdb.Main(m) }

// The demo's charge waits for its order as a client must: 422
// order-not-found (nothing stored) is charged again, and so are 409
// request-in-progress, which the service answers when the order is
// projected while the charge runs, and 503, each after its Retry-After;
// every attempt sends the same key and body. A demo that retries only 422
// fails `make demo` on a fresh stack about one run in eight.
func TestChargeOnceOrderKnownRetriesAsAClientMust(t *testing.T) {
	t.Parallel()
	problem := func(status, code string) string {
		return `{"type":"x","title":"t","status":` + status + `,"code":"` + code + `"}`
	}
	replies := []struct {
		status     int
		retryAfter string
		body       string
	}{
		{422, "", problem("422", "order-not-found")},
		{409, "1", problem("409", "request-in-progress")},
		{503, "1", problem("503", "outcome-unknown")},
		{201, "", `{"id":7,"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","status":"SUCCEEDED","createdAt":"2026-12-01T10:00:00Z"}`},
	}
	var (
		mu     sync.Mutex
		keys   []string
		bodies []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys, bodies = append(keys, r.Header.Get("Idempotency-Key")), append(bodies, string(b))
		rp := replies[min(len(keys), len(replies))-1]
		mu.Unlock()
		if rp.retryAfter != "" {
			w.Header().Set("Retry-After", rp.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, rp.body)
	}))
	t.Cleanup(srv.Close)
	d, err := newDemo(srv.URL, "demo-secret", "http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	d.orderPause = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	res, err := d.chargeOnceOrderKnown(ctx, "demo-key", demoCharge(1001, "pi_1"))
	if err != nil || res.Payment.ID != 7 || res.Payment.Status != "SUCCEEDED" {
		t.Fatalf("chargeOnceOrderKnown = %+v, %v; want payment 7 SUCCEEDED", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != len(replies) {
		t.Fatalf("%d requests, want %d", len(keys), len(replies))
	}
	for i := range keys {
		if keys[i] != "demo-key" || bodies[i] != bodies[0] {
			t.Fatalf("request %d sent key %q body %s; want the first request's key and body", i+1, keys[i], bodies[i])
		}
	}
}
