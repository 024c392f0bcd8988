package service

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/consumer"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/telemetry"
)

// newOrderConsumer builds the order-projection consumer, or
// returns nil when KAFKA_BROKERS is not set: the service then serves the
// projection as it is, which is how the dev stack and the HTTP tests run.
func newOrderConsumer(cfg config.Config, tx app.Transactor, reg prometheus.Registerer, tracing *telemetry.Tracing, logger *slog.Logger) (*consumer.Consumer, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, nil
	}
	c := cfg.OrderConsumer
	return consumer.New(consumer.Config{
		Brokers:           cfg.KafkaBrokers,
		Topic:             c.Topic,
		DLTTopic:          c.DLTTopic,
		GroupID:           c.Group,
		DefaultCurrency:   domain.Currency(c.DefaultCurrency),
		MaxClockSkew:      c.MaxClockSkew,
		MaxWait:           c.MaxWait,
		HeartbeatInterval: c.HeartbeatInterval,
		SessionTimeout:    c.SessionTimeout,
		BatchSize:         c.BatchSize,
		BatchWait:         c.BatchWait,
		RetryBackoff:      c.RetryBackoff,
		MaxRetryBackoff:   c.MaxRetryBackoff,
		MaxAttempts:       c.MaxAttempts,
		Tracer:            tracing.TracerIfEnabled("github.com/example/payment-service/internal/consumer"),
	}, app.NewApplyOrderEvents(tx, c.Group), reg, logger)
}
