package outbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/outbox"
)

// ackClock wraps the real producer and notes when each event was first
// acknowledged by the broker.
type ackClock struct {
	outbox.Publisher
	mu    sync.Mutex
	acked map[string]time.Time
	all   chan struct{} // closed once want events are acknowledged
	want  int
}

func (c *ackClock) Publish(ctx context.Context, msgs ...idempotent.Message) error {
	if err := c.Publisher.Publish(ctx, msgs...); err != nil {
		return err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		id := string(m.Headers[0].Value) // the eventId header
		if _, ok := c.acked[id]; !ok {
			c.acked[id] = now
		}
	}
	if len(c.acked) == c.want {
		close(c.all)
	}
	return nil
}

// BenchmarkRelay measures the relay against real PostgreSQL and the
// kafkatest broker (in-process kfake unless KAFKA_BROKERS is set); b.N is
// the number of events. Reported, never asserted.
//
//   - backlog: b.N rows are committed, then the relay starts; events/s is
//     outbox-to-Kafka throughput (read, publish with acks=all, mark).
//   - live: the relay is leading and idle; 4 writers commit one event per
//     transaction. Commit-to-publish latency runs from a writer's commit
//     returning to the broker's acknowledgement of that event (the NOTIFY
//     wake-up included), reported as p50 and p99; events/s is bounded by
//     the writers here.
func BenchmarkRelay(b *testing.B) {
	for _, bc := range []struct {
		name    string
		backlog bool
		batch   int
	}{
		{"backlog/batch=100", true, 100},
		{"backlog/batch=1000", true, 1000},
		{"live/batch=100", false, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const writers, keys = 4, 64
			e := newEnv(b, 6)
			clock := &ackClock{acked: make(map[string]time.Time, b.N), all: make(chan struct{}), want: b.N}
			cfg := e.relayConfig()
			cfg.BatchSize = bc.batch
			cfg.PollInterval = 5 * time.Second
			cfg.NewPublisher = func(topic string) (outbox.Publisher, error) {
				p, err := e.newPublisher(topic)
				if err != nil {
					return nil, err
				}
				clock.Publisher = p
				return clock, nil
			}
			reg := prometheus.NewRegistry()
			cfg.Metrics = outbox.NewMetrics(reg, e.topic)

			var commitsMu sync.Mutex
			commits := make(map[string]time.Time, b.N)
			write := func() {
				var wg sync.WaitGroup
				for w := range writers {
					wg.Go(func() {
						for i := w; i < b.N; i += writers {
							id := e.writeEvent(b, int64(1000+i%keys), int64(i+1))
							now := time.Now()
							commitsMu.Lock()
							commits[id.String()] = now
							commitsMu.Unlock()
						}
					})
				}
				wg.Wait()
			}

			if bc.backlog {
				write()
			} else {
				runRelay(b, cfg)
				waitLeading(b, reg)
			}
			b.ResetTimer()
			start := time.Now()
			if bc.backlog {
				runRelay(b, cfg)
			} else {
				write()
			}
			select {
			case <-clock.all:
			case <-time.After(5 * time.Minute):
				b.Fatalf("events not all acknowledged within 5m")
			}
			elapsed := time.Since(start)
			b.StopTimer()

			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			if !bc.backlog {
				commitsMu.Lock()
				clock.mu.Lock()
				lat := make([]time.Duration, 0, b.N)
				for id, at := range clock.acked {
					lat = append(lat, at.Sub(commits[id]))
				}
				clock.mu.Unlock()
				commitsMu.Unlock()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

func waitLeading(b *testing.B, reg *prometheus.Registry) {
	b.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "outbox_relay_leader" && mf.GetMetric()[0].GetGauge().GetValue() == 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("relay not leading after %s", waitTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
