package consumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/testdb"
)

// perMessageBaseline is the style guide's listener, for comparison only:
// one database transaction per event (@Transactional around
// tryMarkProcessed and the upsert), with the same SQL and the same offset
// handling as the real consumer (Spring Kafka's default AckMode.BATCH also
// commits offsets once per poll). It is not production code.
type perMessageBaseline struct{ uc *app.ApplyOrderEvents }

func (b perMessageBaseline) Handle(ctx context.Context, events []app.OrderCreated) (app.ApplyResult, error) {
	var total app.ApplyResult
	for _, e := range events {
		r, err := b.uc.Handle(ctx, []app.OrderCreated{e})
		if err != nil {
			return app.ApplyResult{}, err
		}
		total.Duplicates += r.Duplicates
		total.Superseded += r.Superseded
		total.Written += r.Written
	}
	return total, nil
}

// BenchmarkOrderProjectionConsumer measures events per second through
// dedup and projection: kafka-go reader, processed_event insert,
// order_projection upsert, offset commit, against the kafkatest broker
// (in-process kfake unless KAFKA_BROKERS is set) and a real PostgreSQL.
// Each iteration pre-publishes its events on a 3-partition topic, then
// times the consumer from the moment its first batch is applied (so the
// group join is not counted) to the last event. Reported, never asserted;
// see docs/benchmarks.md.
func BenchmarkOrderProjectionConsumer(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	for _, bc := range []struct {
		name     string
		events   int
		baseline bool
	}{
		{"batched", 50000, false},
		{"per-message-baseline", 5000, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var events, seconds float64
			b.StopTimer() // runs only while events are being applied
			for range b.N {
				n, d := benchOnce(b, brokers, bc.events, bc.baseline)
				events += float64(n)
				seconds += d.Seconds()
			}
			b.ReportMetric(events/seconds, "events/s")
			b.ReportMetric(0, "ns/op") // per iteration, not per event: events/s is the number
		})
	}
}

// benchOnce returns how many events were applied in how long.
func benchOnce(b *testing.B, brokers []string, n int, baseline bool) (int, time.Duration) {
	topic, dlt := kafkatest.CreateTopic(b, brokers, 3), kafkatest.CreateTopic(b, brokers, 1)
	dsn := testdb.New(b)
	var msgs []idempotent.Message
	for i := range n {
		msgs = append(msgs, newEvent(int64(1+i), strconv.Itoa(10+i%1000)+".50", t0).message())
	}
	p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for start := 0; start < n; start += 5000 {
		if err := p.Publish(ctx, msgs[start:min(start+5000, n)]...); err != nil {
			b.Fatal(err)
		}
	}
	p.Close()

	cfg := testConfig(brokers, topic, dlt)
	cfg.BatchSize = 500 // the service default
	cfg.MaxRetryBackoff = time.Second
	r := startBench(b, cfg, dsn, baseline)
	defer r.stop()

	// Time from the first applied batch to the last event; the events of
	// that first batch are not counted.
	deadline := time.Now().Add(5 * time.Minute)
	var first int
	var began time.Time
	for {
		got := int(counterValue(r.c.metrics.applied))
		now := time.Now()
		if first == 0 && got > 0 {
			first, began = got, now
			b.StartTimer()
		}
		if got >= n {
			b.StopTimer()
			return n - first, now.Sub(began)
		}
		if now.After(deadline) {
			b.Fatalf("only %d of %d events applied", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
