package idempotent

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/kafkatest"
)

// BenchmarkPublish measures acknowledged messages per second against the
// kafkatest broker (in-process kfake unless KAFKA_BROKERS is set). Each
// sub-benchmark has publishers goroutines calling Publish with batch
// messages of 100 bytes over 6 partitions. Numbers depend on the machine
// and on kfake; they are reported, never asserted.
func BenchmarkPublish(b *testing.B) {
	brokers := kafkatest.Brokers(b)
	value := make([]byte, 100)
	for _, bc := range []struct{ publishers, batch int }{
		{1, 1},
		{1, 100},
		{8, 1},
		{8, 100},
	} {
		b.Run(fmt.Sprintf("publishers=%d/batch=%d", bc.publishers, bc.batch), func(b *testing.B) {
			topic := kafkatest.CreateTopic(b, brokers, 6)
			p := newTestProducer(b, brokers, topic, nil)
			ctx := testContext(b)
			batches := make([][]Message, bc.publishers)
			for g := range batches {
				for i := range bc.batch {
					batches[g] = append(batches[g], Message{Key: []byte("key-" + strconv.Itoa(g*bc.batch+i)), Value: value})
				}
			}

			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			errs := make([]error, bc.publishers)
			for g := range bc.publishers {
				wg.Go(func() {
					// Split b.N Publish calls over the publishers.
					for i := g; i < b.N && errs[g] == nil; i += bc.publishers {
						errs[g] = p.Publish(ctx, batches[g]...)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*bc.batch)/elapsed.Seconds(), "msgs/s")
		})
	}
}
