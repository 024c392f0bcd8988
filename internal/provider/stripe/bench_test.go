package stripe_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/stripefake"
)

// BenchmarkCharge is what a charge costs the adapter in the service's
// process: one Charge through stripe-go against a server that answers
// what the stateful fake answered for it, byte for byte, at once (so the
// fake's own work is not counted). bench-api's -provider stripe measures
// the whole service's CPU per charge against the sandbox's; this is the
// adapter's share of it, with its allocations.
func BenchmarkCharge(b *testing.B) {
	fake := stripefake.New(stripefake.Config{SecretKey: secretKey})
	b.Cleanup(func() { _ = fake.Close() })
	var answer []byte
	record := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		fake.Handler().ServeHTTP(rec, r)
		answer = rec.Body.Bytes()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(answer)
	}))
	b.Cleanup(record.Close)
	p := payment(&testing.T{}, "pi_bench", stripefake.PMVisa)
	req := chargeOf(p)
	ctx := context.Background()
	if _, err := client(&testing.T{}, record.URL).Charge(ctx, req); err != nil {
		b.Fatal(err)
	}
	canned := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(bytes.Clone(answer))
	}))
	b.Cleanup(canned.Close)
	c := client(&testing.T{}, canned.URL)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if d, err := c.Charge(ctx, req); err != nil || d != app.ProviderApproved {
			b.Fatalf("charge: %q %v", d, err)
		}
	}
}
