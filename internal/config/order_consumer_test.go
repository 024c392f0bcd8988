package config_test

import (
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestLoadOrderConsumerDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.OrderConsumer{
		Topic: "order.events", DLTTopic: "order.events.DLT", Group: "order-projection", DefaultCurrency: "RUB",
		MaxWait: 500 * time.Millisecond, HeartbeatInterval: 3 * time.Second, SessionTimeout: 45 * time.Second,
		BatchSize: 500, BatchWait: 10 * time.Millisecond, MaxClockSkew: 5 * time.Minute,
		RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: 10 * time.Second, MaxAttempts: 5,
	}
	if cfg.OrderConsumer != want {
		t.Fatalf("OrderConsumer = %+v, want %+v", cfg.OrderConsumer, want)
	}
}

func TestLoadOrderConsumerRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"topic with a space", map[string]string{"ORDER_EVENTS_TOPIC": "order events"}, "ORDER_EVENTS_TOPIC"},
		{"dlt is the topic", map[string]string{"ORDER_EVENTS_DLT_TOPIC": "order.events"}, "ORDER_EVENTS_DLT_TOPIC"},
		{"lower-case currency", map[string]string{"DEFAULT_CURRENCY": "rub"}, "DEFAULT_CURRENCY"},
		{"currency too long", map[string]string{"DEFAULT_CURRENCY": "RUBL"}, "DEFAULT_CURRENCY"},
		{"max wait not a duration", map[string]string{"KAFKA_CONSUMER_MAX_WAIT": "100"}, "KAFKA_CONSUMER_MAX_WAIT"},
		{"heartbeat over a third of the session", map[string]string{"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "20s"}, "KAFKA_CONSUMER_HEARTBEAT_INTERVAL"},
		{"session too short", map[string]string{"KAFKA_CONSUMER_SESSION_TIMEOUT": "1ms"}, "KAFKA_CONSUMER_SESSION_TIMEOUT"},
		{"batch zero", map[string]string{"KAFKA_CONSUMER_BATCH_SIZE": "0"}, "KAFKA_CONSUMER_BATCH_SIZE"},
		{"batch huge", map[string]string{"KAFKA_CONSUMER_BATCH_SIZE": "100000"}, "KAFKA_CONSUMER_BATCH_SIZE"},
		{"batch wait negative", map[string]string{"KAFKA_CONSUMER_BATCH_WAIT": "-1s"}, "KAFKA_CONSUMER_BATCH_WAIT"},
		{"clock skew not a duration", map[string]string{"ORDER_EVENTS_MAX_CLOCK_SKEW": "5"}, "ORDER_EVENTS_MAX_CLOCK_SKEW"},
		{"clock skew over a day", map[string]string{"ORDER_EVENTS_MAX_CLOCK_SKEW": "25h"}, "ORDER_EVENTS_MAX_CLOCK_SKEW"},
		{"attempts zero", map[string]string{"KAFKA_CONSUMER_MAX_ATTEMPTS": "0"}, "KAFKA_CONSUMER_MAX_ATTEMPTS"},
		{"attempts over 100", map[string]string{"KAFKA_CONSUMER_MAX_ATTEMPTS": "101"}, "KAFKA_CONSUMER_MAX_ATTEMPTS"},
		{"max backoff under backoff", map[string]string{"KAFKA_CONSUMER_RETRY_BACKOFF": "5s", "KAFKA_CONSUMER_MAX_RETRY_BACKOFF": "1s"}, "KAFKA_CONSUMER_MAX_RETRY_BACKOFF"},
	})
}

func TestLoadOrderConsumerTunedForTests(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(map[string]string{
		"KAFKA_CONSUMER_MAX_WAIT": "100ms", "KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT": "1s", "DEFAULT_CURRENCY": "EUR",
	}))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.OrderConsumer
	if c.MaxWait != 100*time.Millisecond || c.HeartbeatInterval != 100*time.Millisecond || c.SessionTimeout != time.Second || c.DefaultCurrency != "EUR" {
		t.Fatalf("OrderConsumer = %+v", c)
	}
}
