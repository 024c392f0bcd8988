package repository_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
)

// BenchmarkApplyOrderEvents measures the database side of the consumer
// alone: one ApplyOrderEvents transaction per batch of new events (new ids,
// new orders), on a real PostgreSQL. See docs/benchmarks.md.
func BenchmarkApplyOrderEvents(b *testing.B) {
	for _, size := range []int{1, 100, 500, 2000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			_, tx := openDB(b)
			uc := app.NewApplyOrderEvents(tx, "order-projection")
			t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
			next := int64(1)
			batches := make([][]app.OrderCreated, b.N)
			for i := range batches {
				for range size {
					batches[i] = append(batches[i], orderEvent(b, next, "10.50", t0))
					next++
				}
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := uc.Handle(context.Background(), batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
