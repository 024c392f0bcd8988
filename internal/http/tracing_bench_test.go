package http_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/testdb"
)

// BenchmarkTracing measures what tracing costs POST /payments, over real
// HTTP against the real service and PostgreSQL, as BenchmarkChargePayment
// does, with tracing
//
//	off   the default (no OTEL_* endpoint): no SDK, no HTTP middleware, no
//	      statement tracer; the use case's spans go to the no-op tracer
//	on    the SDK with a batch span processor, as in production, exporting
//	      to an exporter that drops the spans (no network in a benchmark)
//
// for new charges (C=1 and C=16) and replays (C=16), off right before on
// for each case. It reports requests/s and p50/p99; nothing is asserted.
// -count repeats each sub-benchmark in a row, so on a shared machine
// compare medians of several runs, and check the load first: the
// difference to find is a few per cent.
//
//	go test -run '^$' -bench BenchmarkTracing -benchtime 2000x -count 3 ./internal/http/
//
// The cost of tracing off in isolation, without the database's noise, is
// BenchmarkInstrumentationOff in internal/telemetry.
func BenchmarkTracing(b *testing.B) {
	for _, c := range []struct {
		mode    string
		clients int
	}{{"new-key", 1}, {"new-key", 16}, {"replay", 16}} {
		for _, tracing := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("%s/clients=%d/tracing=%s", c.mode, c.clients, tracing), func(b *testing.B) {
				var opts []startOption
				if tracing == "on" {
					provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
					b.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
					opts = append(opts, func(o *startOptions) {
						o.service = append(o.service, service.WithTracerProvider(provider))
					})
				}
				// The service as a user runs it: its request log included.
				s := startServiceWith(b, testdb.New(b), map[string]string{"DATABASE_MAX_CONNS": "32"}, sandboxprovider.Config{}, opts...)
				benchmarkTracedCharges(b, s, c.mode, c.clients)
			})
		}
	}
}

// discardExporter drops what the batch processor hands it.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func benchmarkTracedCharges(b *testing.B, s *testService, mode string, clients int) {
	const orders = 100_000
	if _, err := s.db.Exec(b.Context(), `
		INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 100.50, 'RUB' FROM generate_series(1, $1) g`, orders); err != nil {
		b.Fatal(err)
	}
	if mode == "replay" {
		if r := s.charge(b, "replay-key", chargeBody(1, 42, "100.50", "RUB", "pi_replay")); r.status != http.StatusCreated {
			b.Fatalf("setup: %d %s", r.status, r.body)
		}
	}
	transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	defer transport.CloseIdleConnections()

	var next atomic.Int64
	var mu sync.Mutex
	latencies := make([]time.Duration, 0, b.N)
	work := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, b.N/clients+1)
			defer func() {
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
			for range work {
				key, body := "replay-key", chargeBody(1, 42, "100.50", "RUB", "pi_replay")
				if mode == "new-key" {
					n := next.Add(1)
					if n > orders {
						b.Error("benchmark ran out of seeded orders")
						return
					}
					key, body = fmt.Sprintf("bench-%d", n), chargeBody(n, 42, "100.50", "RUB", fmt.Sprintf("pi_bench_%d", n))
				}
				req, _ := http.NewRequest(http.MethodPost, s.url+"/payments", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+demoKey)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				local = append(local, time.Since(t0))
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
