package app_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// A step's key names its step, and no other key reads as one: the saga's
// keys live in a namespace of their own.
func TestSagaStepKeys(t *testing.T) {
	saga := uuid.MustParse("0193a5d2-7c1e-7b3a-9f4e-2d6c8b1a0e5f")
	step, err := app.NewSagaStep(saga, "charge-payment")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		scope           app.IdempotencyScope
		wantStep        string
		wantCompensates string
		wantOK          bool
	}{
		{"a charge step", app.SagaStepScope("saga", step), "charge-payment", "", true},
		{"a compensation", app.SagaCompensationScope("saga", app.SagaStep{SagaID: saga, Name: "refund-payment"}, "charge-payment"),
			"refund-payment", "charge-payment", true},
		{"a step name with a colon", app.SagaStepScope("saga", app.SagaStep{SagaID: saga, Name: "a:b"}), "a:b", "", true},
		{"an HTTP key that looks like a step's", app.IdempotencyScope{ClientID: "saga", Key: "saga:" + saga.String() + ":charge-payment"}, "", "", false},
		{"the prefix and no saga", app.IdempotencyScope{ClientID: "saga", Key: app.SagaKeyPrefix + "not-a-uuid-at-all-but-36-characters!:x"}, "", "", false},
		{"the prefix and no step", app.IdempotencyScope{ClientID: "saga", Key: app.SagaKeyPrefix + saga.String() + ":"}, "", "", false},
		{"an ordinary key", app.IdempotencyScope{ClientID: "demo-client", Key: "order-1001"}, "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, compensates, ok := app.SagaStepOf(tc.scope)
			if ok != tc.wantOK || got.Name != tc.wantStep || compensates != tc.wantCompensates || ok && got.SagaID != saga {
				t.Fatalf("SagaStepOf(%q) = %+v, %q, %v; want %q, %q, %v", tc.scope.Key, got, compensates, ok, tc.wantStep, tc.wantCompensates, tc.wantOK)
			}
		})
	}
}

func TestNewSagaStepRefusesWhatNoKeyCanHold(t *testing.T) {
	saga := uuid.New()
	tests := []struct {
		name string
		saga uuid.UUID
		step string
	}{
		{"no saga", uuid.Nil, "charge-payment"},
		{"an empty name", saga, ""},
		{"101 characters", saga, string(make([]byte, 101))},
		{"the key's separator", saga, "a§b"},
		{"a control character", saga, "a\nb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := app.NewSagaStep(tc.saga, tc.step); err == nil {
				t.Fatalf("NewSagaStep(%v, %q) accepted it", tc.saga, tc.step)
			} else if !isInvalid(err) {
				t.Fatalf("NewSagaStep(%v, %q) = %v, want domain.ErrInvalid", tc.saga, tc.step, err)
			}
		})
	}
}

func isInvalid(err error) bool { return errors.Is(err, domain.ErrInvalid) }
