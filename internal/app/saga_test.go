package app_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

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

// An authorizing step (captureMethod manual) is answered authorized, with
// what the provider holds; a one-step charge is answered charged, as it
// was before a step could authorize. Their content hashes differ, and an
// explicit automatic hashes as a step that named no capture method.
func TestAnAuthorizingStepsReply(t *testing.T) {
	step := app.SagaStep{SagaID: uuid.MustParse("0193a5d2-7c1e-7b3a-9f4e-2d6c8b1a0e5f"), Name: "charge-payment"}
	money, err := domain.NewMoney(decimal.RequireFromString("25.00"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(1001, 42, money, "sandbox", "pi_1")
	if err != nil {
		t.Fatal(err)
	}
	manual, automatic := charge, charge
	manual.CaptureMethod, automatic.CaptureMethod = domain.CaptureManual, domain.CaptureAutomatic
	for _, tc := range []struct {
		name   string
		charge domain.Charge
		status domain.PaymentStatus
		want   app.SagaReplyType
	}{
		{"a one-step charge", charge, domain.PaymentSucceeded, app.ReplyCharged},
		{"an authorization", manual, domain.PaymentAuthorized, app.ReplyAuthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := domain.Payment{ID: 7, Charge: tc.charge, Status: tc.status}
			for _, kind := range []app.ChargeOutcomeKind{app.ChargeSucceeded, app.ChargeAlreadyRecorded} {
				r := app.ChargeReply(step, app.ChargeOutcome{Kind: kind, Payment: p})
				if r.Type != tc.want || r.PaymentID != 7 || r.OrderID != 1001 || !r.Amount.Equal(money.Amount()) || r.Currency != "RUB" {
					t.Fatalf("outcome %d: reply %+v, want %s of payment 7 for 25.00 RUB", kind, r, tc.want)
				}
			}
		})
	}
	hash := func(c domain.Charge) string {
		return app.ChargeCommand{Scope: app.SagaStepScope("saga", step), Charge: c, Operation: app.OperationSagaCharge}.Hash()
	}
	if hash(charge) != hash(automatic) || hash(charge) == hash(manual) {
		t.Fatal("an automatic step must hash as one that named no capture method, and a manual one otherwise")
	}
}

// An authorized step's compensation is answered by its void's outcome:
// compensated with zero and voided when the hold is released; failed, with
// the hold standing, when the provider declines or refuses the void.
func TestAVoidingCompensationsReply(t *testing.T) {
	step := app.SagaStep{SagaID: uuid.MustParse("0193a5d2-7c1e-7b3a-9f4e-2d6c8b1a0e5f"), Name: "release-payment"}
	p := domain.Payment{ID: 7, Status: domain.PaymentVoided}
	for _, tc := range []struct {
		kind   app.TransitionOutcomeKind
		want   app.SagaReplyType
		code   string
		voided bool
		zero   bool
	}{
		{app.TransitionSucceeded, app.ReplyCompensated, "", true, true},
		{app.TransitionDeclined, app.ReplyFailed, app.SagaCodeVoidDeclined, false, false},
		{app.TransitionFailed, app.ReplyFailed, app.SagaCodeVoidFailed, false, false},
	} {
		r := app.VoidReply(step, "charge-payment", app.TransitionOutcome{Kind: tc.kind, Payment: p})
		if r.Type != tc.want || r.Code != tc.code || r.Voided != tc.voided || r.PaymentID != 7 || r.Compensates != "charge-payment" || r.Step != step {
			t.Fatalf("outcome %d: reply %+v, want %s %q voided %v", tc.kind, r, tc.want, tc.code, tc.voided)
		}
		if tc.zero && (!r.Amount.IsZero() || r.Currency != "") {
			t.Fatalf("a void gave back %s %s; nothing was taken", r.Amount, r.Currency)
		}
	}
}
