package config_test

import (
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func TestLoadSagaDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Saga{
		CommandsTopic: "payment.commands", CommandsDLTTopic: "payment.commands.DLT", RepliesTopic: "payment.replies",
		Group: "payment-saga", ClientID: "saga", OrderWait: 30 * time.Second, Workers: 16,
		BatchWait: config.SagaBatchWait,
	}
	if cfg.Saga != want {
		t.Fatalf("Saga = %+v, want %+v", cfg.Saga, want)
	}
	// The order events keep a wait of their own, to fill their
	// transactions.
	if cfg.OrderConsumer.BatchWait != 10*time.Millisecond {
		t.Fatalf("OrderConsumer.BatchWait = %s, want 10ms", cfg.OrderConsumer.BatchWait)
	}
}

// The commands' batch wait is their own: KAFKA_CONSUMER_BATCH_WAIT does
// not set it, and it does not set the order events'.
func TestLoadSagaBatchWaitIsTheCommandsOwn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		env         map[string]string
		saga, order time.Duration
	}{
		{"only the order events'", map[string]string{"KAFKA_CONSUMER_BATCH_WAIT": "50ms"}, config.SagaBatchWait, 50 * time.Millisecond},
		{"only the commands'", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "5ms"}, 5 * time.Millisecond, 10 * time.Millisecond},
		{"no wait", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "0s"}, 0, 10 * time.Millisecond},
		{"the upper bound", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "10s"}, 10 * time.Second, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Saga.BatchWait != tc.saga || cfg.OrderConsumer.BatchWait != tc.order {
				t.Fatalf("batch waits: commands %s, order events %s; want %s and %s",
					cfg.Saga.BatchWait, cfg.OrderConsumer.BatchWait, tc.saga, tc.order)
			}
		})
	}
}

func TestLoadSagaRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"batch wait negative", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "-1ms"}, "SAGA_CONSUMER_BATCH_WAIT"},
		{"batch wait not a duration", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "1"}, "SAGA_CONSUMER_BATCH_WAIT"},
		{"batch wait over 10s", map[string]string{"SAGA_CONSUMER_BATCH_WAIT": "11s"}, "SAGA_CONSUMER_BATCH_WAIT"},
		{"workers over 256", map[string]string{"SAGA_WORKERS": "257"}, "SAGA_WORKERS"},
		{"workers zero", map[string]string{"SAGA_WORKERS": "0"}, "SAGA_WORKERS"},
		{"order wait over an hour", map[string]string{"SAGA_ORDER_WAIT": "61m"}, "SAGA_ORDER_WAIT"},
		{"dlt is the commands topic", map[string]string{"PAYMENT_COMMANDS_DLT_TOPIC": "payment.commands"}, "PAYMENT_COMMANDS_DLT_TOPIC"},
		{"group is the order consumer's", map[string]string{"PAYMENT_COMMANDS_GROUP": "order-projection"}, "PAYMENT_COMMANDS_GROUP"},
	})
}
