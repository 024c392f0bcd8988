package http_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkChargePayment measures POST /payments over real HTTP against the
// real service and PostgreSQL (fsync on), with C concurrent clients:
//
//	new-key   every request a new key, order and external payment (a charge)
//	replay    every request the same key and command (a stored response)
//
// It reports requests/s and the p50/p99 latency of single requests. The
// numbers and the command are in docs/benchmarks.md; nothing is asserted.
func BenchmarkChargePayment(b *testing.B) {
	for _, mode := range []string{"new-key", "replay"} {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/clients=%d", mode, clients), func(b *testing.B) {
				s := startService(b, map[string]string{"DATABASE_MAX_CONNS": "32", "LOG_LEVEL": "error"})
				benchmarkCharges(b, s, mode, clients)
			})
		}
	}
}

// benchmarkCharges sends b.N charges to s from clients concurrent clients
// and reports requests/s, p50 and p99.
func benchmarkCharges(b *testing.B, s *testService, mode string, clients int) {
	const orders = 200_000
	// One multi-row insert of orders the new-key requests can pay.
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
			for range work {
				key, body := "replay-key", chargeBody(1, 42, "100.50", "RUB", "pi_replay")
				wantStatus := http.StatusCreated
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
				if resp.StatusCode != wantStatus {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		})
	}
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	slices.Sort(latencies)
	if len(latencies) == 0 {
		return
	}
	pct := func(p float64) float64 {
		return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
