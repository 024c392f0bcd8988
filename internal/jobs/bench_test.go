package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// BenchmarkPurgeExpired measures how fast the purge deletes a backlog of
// expired idempotency records, by batch size. Each iteration purges a fresh
// backlog of 100,000 rows; the metric is rows deleted per second.
func BenchmarkPurgeExpired(b *testing.B) {
	const backlog = 100_000
	for _, batch := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			dsn := testdb.New(b)
			db := pool(b, dsn)
			r := newReplica(b, dsn, replicaOptions{})
			uc := app.NewPurgeExpired(repository.NewRetention(r.db), defaultPolicy, batch)
			var deleted int
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				exec(b, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, created_at)
					SELECT 'c', 'old-' || i, 'h', 'COMPLETED', '{}', 201, now() - interval '100 hours'
					  FROM generate_series(1, $1) AS i`, backlog)
				exec(b, db, `VACUUM ANALYZE idempotency_record`)
				b.StartTimer()
				start := time.Now()
				results, err := uc.Handle(context.Background(), time.Now())
				elapsed += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if results[0].Deleted != backlog {
					b.Fatalf("deleted %d, want %d", results[0].Deleted, backlog)
				}
				deleted += results[0].Deleted
			}
			b.ReportMetric(float64(deleted)/elapsed.Seconds(), "rows/s")
		})
	}
}
