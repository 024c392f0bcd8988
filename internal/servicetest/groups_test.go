package servicetest

import (
	"maps"
	"testing"
)

func TestOwnGroups(t *testing.T) {
	const dsn = "postgres://postgres@127.0.0.1:5432/test_1234?sslmode=disable"
	for _, tc := range []struct {
		name string
		vars map[string]string
		dsn  string
		want map[string]string
	}{{
		name: "a broker: both groups named for the database",
		vars: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092"},
		dsn:  dsn,
		want: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092",
			"ORDER_CONSUMER_GROUP": "order-projection-test_1234", "PAYMENT_COMMANDS_GROUP": "payment-saga-test_1234"},
	}, {
		name: "a group the test names stays",
		vars: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092", "ORDER_CONSUMER_GROUP": "mine"},
		dsn:  dsn,
		want: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092",
			"ORDER_CONSUMER_GROUP": "mine", "PAYMENT_COMMANDS_GROUP": "payment-saga-test_1234"},
	}, {
		name: "no broker: nothing",
		vars: map[string]string{},
		dsn:  dsn,
		want: map[string]string{},
	}, {
		name: "no database in the URL: nothing",
		vars: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092"},
		dsn:  "postgres://postgres@127.0.0.1:5432",
		want: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ownGroups(tc.vars, tc.dsn)
			if !maps.Equal(tc.vars, tc.want) {
				t.Errorf("ownGroups: %v, want %v", tc.vars, tc.want)
			}
		})
	}
}
