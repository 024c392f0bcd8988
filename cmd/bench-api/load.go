package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// result is one measurement: a fixed number of concurrent clients for a
// fixed time, each sending its next request as soon as the last answered.
type result struct {
	Requests   int           `json:"requests"`
	Errors     int           `json:"errors"` // transport errors and unexpected statuses
	Duration   time.Duration `json:"duration"`
	PerSecond  float64       `json:"perSecond"`
	P50        time.Duration `json:"p50"`
	P99        time.Duration `json:"p99"`
	FirstError string        `json:"firstError,omitempty"`
	// CPUPerRequest is the service's CPU time (user and system, from
	// /proc) over the measured part of the run, per request: what a request
	// costs the service, which the machine's noise moves far less than
	// requests/s. Zero for pgbench.
	CPUPerRequest time.Duration `json:"cpuPerRequest,omitempty"`
	// DBCPUPerRequest is the database cluster's CPU time (clusterCPU) over
	// the same part, per request: where the cost of planning shows.
	DBCPUPerRequest time.Duration `json:"dbCpuPerRequest,omitempty"`
	// HotRowsPerRequest is how many rows of payment and idempotency_record
	// the database read per request (hotRowsRead); the cold start's only.
	HotRowsPerRequest float64 `json:"hotRowsPerRequest,omitempty"`
}

// request builds the i-th request of client c.
type request func(c, i int) (*http.Request, int) // and the status it must get

// closedLoop runs clients concurrent clients for warmup+d and measures the
// requests that start after the warmup.
func closedLoop(ctx context.Context, clients int, warmup, d time.Duration, next request) result {
	transport := &http.Transport{
		MaxIdleConns:        clients,
		MaxIdleConnsPerHost: clients,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	tallies := make([]tally, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					return
				}
				req, want := next(c, i)
				status, err := do(client, req.WithContext(ctx))
				took := time.Since(t0)
				if t0.Before(measureFrom) {
					continue
				}
				if err == nil && status != want {
					err = fmt.Errorf("status %d, want %d", status, want)
				}
				tallies[c].add(took, err)
			}
		})
	}
	wg.Wait()
	return resultOf(d, tallies)
}

// tally is what one client of a load saw in the measured part.
type tally struct {
	latencies []time.Duration
	errors    int
	firstErr  string
}

// add counts one request: its latency, or its error.
func (t *tally) add(took time.Duration, err error) {
	if err != nil {
		t.errors++
		if t.firstErr == "" {
			t.firstErr = err.Error()
		}
		return
	}
	t.latencies = append(t.latencies, took)
}

// resultOf is the result of a measured part of d: every client's tally,
// together.
func resultOf(d time.Duration, tallies []tally) result {
	var all []time.Duration
	r := result{Duration: d}
	for _, t := range tallies {
		all = append(all, t.latencies...)
		r.Errors += t.errors
		if r.FirstError == "" {
			r.FirstError = t.firstErr
		}
	}
	slices.Sort(all)
	r.Requests = len(all)
	r.PerSecond = float64(len(all)) / d.Seconds()
	r.P50, r.P99 = percentile(all, 0.50), percentile(all, 0.99)
	return r
}

// cpuOver reads the service's and the database's CPU times at the
// measured part's start (after warmup) and end, on timers: to a few
// milliseconds, of a run of seconds.
func (b *bench) cpuOver(warmup, d time.Duration) <-chan cpuTimes {
	cpu := make(chan cpuTimes, 1)
	go func() {
		time.Sleep(warmup)
		before := b.cpuTimes()
		time.Sleep(d)
		cpu <- b.cpuTimes().since(before)
	}()
	return cpu
}

func do(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// chargeRequest is a POST /payments with its key and body.
func chargeRequest(api, apiKey, key, body string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, api+"/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	return req
}

// chargeBodyWith is a charge of order as external, with tail as its
// provider's members (sandboxTail, stripeTail).
func chargeBodyWith(order int64, external, tail string) string {
	return fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":"10.00","currency":"RUB",%s,"externalPaymentId":"%s"}`, order, tail, external)
}
