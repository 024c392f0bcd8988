package service

import (
	"log/slog"
	"time"

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
	cc := consumerConfig(cfg, tracing)
	cc.Topic, cc.DLTTopic, cc.GroupID = c.Topic, c.DLTTopic, c.Group
	cc.DefaultCurrency, cc.MaxClockSkew = domain.Currency(c.DefaultCurrency), c.MaxClockSkew
	return consumer.New(cc, app.NewApplyOrderEvents(tx, c.Group), reg, logger)
}

// newSagaConsumer builds the payment commands' consumer, or returns nil
// when KAFKA_BROKERS is not set.
func newSagaConsumer(cfg config.Config, steps *app.SagaSteps, reg prometheus.Registerer, tracing *telemetry.Tracing, logger *slog.Logger) (*consumer.SagaConsumer, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, nil
	}
	cc := sagaConsumerConfig(cfg, tracing)
	return consumer.NewSagaConsumer(cc, steps, cfg.Saga.Workers, reg, logger)
}

// sagaConsumerConfig is the commands consumer's configuration: the
// KAFKA_CONSUMER_* settings but for the batch wait, which is its own
// (SAGA_CONSUMER_BATCH_WAIT; config.Saga.BatchWait says why).
func sagaConsumerConfig(cfg config.Config, tracing *telemetry.Tracing) consumer.Config {
	cc := consumerConfig(cfg, tracing)
	cc.Topic, cc.DLTTopic, cc.GroupID = cfg.Saga.CommandsTopic, cfg.Saga.CommandsDLTTopic, cfg.Saga.Group
	cc.BatchWait = batchWait(cfg.Saga.BatchWait)
	return cc
}

// batchWait is a configured batch wait as the consumer takes it, whose
// zero is its default: a configured 0 is no wait.
func batchWait(d time.Duration) time.Duration {
	if d == 0 {
		return consumer.NoBatchWait
	}
	return d
}

// consumerConfig is what both consumers take from KAFKA_*.
func consumerConfig(cfg config.Config, tracing *telemetry.Tracing) consumer.Config {
	c := cfg.OrderConsumer
	return consumer.Config{
		Brokers:           cfg.KafkaBrokers,
		MaxWait:           c.MaxWait,
		HeartbeatInterval: c.HeartbeatInterval,
		SessionTimeout:    c.SessionTimeout,
		BatchSize:         c.BatchSize,
		BatchWait:         batchWait(c.BatchWait),
		RetryBackoff:      c.RetryBackoff,
		MaxRetryBackoff:   c.MaxRetryBackoff,
		MaxAttempts:       c.MaxAttempts,
		Tracer:            tracing.TracerIfEnabled("github.com/example/payment-service/internal/consumer"),
	}
}
