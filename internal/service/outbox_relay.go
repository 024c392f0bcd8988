package service

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/telemetry"
)

// newOutboxRelay builds the outbox relay when Kafka is configured, or
// returns nil: events then wait in the outbox. Every replica runs one; a
// PostgreSQL advisory lock makes one of them the leader that publishes (see
// internal/outbox).
func newOutboxRelay(cfg config.Config, logger *slog.Logger, reg prometheus.Registerer, tracing *telemetry.Tracing) (*outbox.Relay, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, nil
	}
	return outbox.New(outbox.Config{
		Store: repository.NewOutboxRelayStore(cfg.DatabaseURL),
		// Each row goes to the topic stored in it, which is
		// PAYMENT_EVENTS_TOPIC as it was when the row was written.
		NewPublisher: func(topic string) (outbox.Publisher, error) {
			return idempotent.New(idempotent.Config{
				Brokers:  cfg.KafkaBrokers,
				Topic:    topic,
				ClientID: "payment-service-outbox",
			})
		},
		BatchSize:    cfg.OutboxBatchSize,
		PollInterval: cfg.OutboxPollInterval,
		Metrics:      outbox.NewMetrics(reg, cfg.PaymentEventsTopic),
		Logger:       logger,
		Tracer:       tracing.TracerIfEnabled("github.com/example/payment-service/internal/outbox"),
	})
}
