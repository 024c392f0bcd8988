package sandbox_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// BenchmarkCharge is what a charge costs the adapter in the service's
// process: one Charge against a server that answers what the sandbox
// provider answered for it, byte for byte, at once (so the provider's own
// work is not counted). The Stripe adapter's BenchmarkCharge
// (internal/provider/stripe) is the same, to set beside it.
func BenchmarkCharge(b *testing.B) {
	done := make(chan struct{})
	b.Cleanup(func() { close(done) })
	provider := sandboxprovider.New(sandboxprovider.Config{})
	var answer []byte
	var header http.Header
	record := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		provider.Handler(done).ServeHTTP(rec, r)
		answer, header = rec.Body.Bytes(), rec.Header()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(answer)
	}))
	b.Cleanup(record.Close)
	req := charge(&testing.T{}, "pi_bench")
	ctx := context.Background()
	if _, err := newClient(b, record.URL).Charge(ctx, req); err != nil {
		b.Fatal(err)
	}
	canned := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for k, v := range header {
			w.Header()[k] = v
		}
		_, _ = w.Write(bytes.Clone(answer))
	}))
	b.Cleanup(canned.Close)
	c := newClient(b, canned.URL)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d, err := c.Charge(ctx, req); err != nil || d != app.ProviderApproved {
			b.Fatalf("charge: %q %v", d, err)
		}
	}
}

func newClient(b *testing.B, base string) *sandbox.Client {
	b.Helper()
	c, err := sandbox.New(sandbox.Config{BaseURL: base, ConnectTimeout: time.Second, Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return c
}
