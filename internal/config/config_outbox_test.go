package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestLoadOutboxSettings(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PaymentEventsTopic != "payment.events" || cfg.OutboxBatchSize != 100 || cfg.OutboxPollInterval != 5*time.Second {
		t.Fatalf("outbox defaults = %q %d %s", cfg.PaymentEventsTopic, cfg.OutboxBatchSize, cfg.OutboxPollInterval)
	}
	cfg, err = config.Load(env(map[string]string{
		"PAYMENT_EVENTS_TOPIC": "payments.v1-events_x", "OUTBOX_BATCH_SIZE": "500", "OUTBOX_POLL_INTERVAL": "250ms",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PaymentEventsTopic != "payments.v1-events_x" || cfg.OutboxBatchSize != 500 || cfg.OutboxPollInterval != 250*time.Millisecond {
		t.Fatalf("outbox settings = %q %d %s", cfg.PaymentEventsTopic, cfg.OutboxBatchSize, cfg.OutboxPollInterval)
	}

	wantRejected(t, []rejection{
		{"topic with a space", map[string]string{"PAYMENT_EVENTS_TOPIC": "payment events"}, "PAYMENT_EVENTS_TOPIC"},
		{"topic too long", map[string]string{"PAYMENT_EVENTS_TOPIC": strings.Repeat("t", 250)}, "PAYMENT_EVENTS_TOPIC"},
		{"topic dot", map[string]string{"PAYMENT_EVENTS_TOPIC": "."}, "PAYMENT_EVENTS_TOPIC"},
		{"batch zero", map[string]string{"OUTBOX_BATCH_SIZE": "0"}, "OUTBOX_BATCH_SIZE"},
		{"batch huge", map[string]string{"OUTBOX_BATCH_SIZE": "10001"}, "OUTBOX_BATCH_SIZE"},
		{"poll not a duration", map[string]string{"OUTBOX_POLL_INTERVAL": "5"}, "OUTBOX_POLL_INTERVAL"},
		{"poll too fast", map[string]string{"OUTBOX_POLL_INTERVAL": "1ms"}, "OUTBOX_POLL_INTERVAL"},
	})
}
