package service

import (
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/consumer"
	"github.com/example/payment-service/internal/telemetry"
)

// The commands consumer waits SAGA_CONSUMER_BATCH_WAIT for a batch to
// fill, and the order events' consumer KAFKA_CONSUMER_BATCH_WAIT; a
// configured 0 is no wait, not the consumer's default.
func TestEachConsumerGetsItsOwnBatchWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		env         map[string]string
		saga, order time.Duration
	}{
		{"defaults", nil, config.SagaBatchWait, 10 * time.Millisecond},
		{"commands without a wait", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "0"}, consumer.NoBatchWait, 10 * time.Millisecond},
		{"both set", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "3ms", "KAFKA_CONSUMER_BATCH_WAIT": "40ms"}, 3 * time.Millisecond, 40 * time.Millisecond},
		{"order events without a wait", map[string]string{"KAFKA_CONSUMER_BATCH_WAIT": "0"}, config.SagaBatchWait, consumer.NoBatchWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vars := map[string]string{
				"DATABASE_URL": "postgres://localhost/payments", "API_KEYS": "demo-client:demo-secret",
				"SANDBOX_PROVIDER_URL": "http://127.0.0.1:8081", "KAFKA_BROKERS": "127.0.0.1:9092",
			}
			for k, v := range tc.env {
				vars[k] = v
			}
			cfg, err := config.Load(func(k string) string { return vars[k] })
			if err != nil {
				t.Fatal(err)
			}
			tracing := &telemetry.Tracing{}
			saga, order := sagaConsumerConfig(cfg, tracing).BatchWait, consumerConfig(cfg, tracing).BatchWait
			if saga != tc.saga || order != tc.order {
				t.Fatalf("batch waits: commands %s, order events %s; want %s and %s", saga, order, tc.saga, tc.order)
			}
		})
	}
}
