package sandbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider/sandbox"
)

func charge(t *testing.T, external string) app.ProviderCharge {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString("10"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(1, 1, m, sandbox.Name, domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return app.ProviderCharge{IdempotencyKey: c.ProviderIdempotencyKey(), Charge: c}
}

func TestSandboxAnswersByExternalID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		external string
		want     app.ProviderDecision
		err      error
	}{
		{"pi_1", app.ProviderApproved, nil},
		{"decline_card", app.ProviderDeclined, nil},
		{"fail_network", "", sandbox.ErrTransient},
	}
	p := sandbox.New(0)
	for _, tc := range tests {
		got, err := p.Charge(context.Background(), charge(t, tc.external))
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.external, got, err, tc.want, tc.err)
		}
	}
	if p.Charges() != 2 {
		t.Fatalf("charges = %d, want 2 (a transient failure charges nothing)", p.Charges())
	}
}

// Like a real provider, the sandbox honours its idempotency key: asking
// again charges nothing new.
func TestSandboxChargesOncePerIdempotencyKey(t *testing.T) {
	t.Parallel()
	p := sandbox.New(0)
	for range 3 {
		if d, err := p.Charge(context.Background(), charge(t, "pi_same")); err != nil || d != app.ProviderApproved {
			t.Fatalf("%q, %v", d, err)
		}
	}
	if p.Charges() != 1 {
		t.Fatalf("charges = %d, want 1", p.Charges())
	}
}

func TestSandboxLatencyEndsWithTheContext(t *testing.T) {
	t.Parallel()
	p := sandbox.New(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Charge(ctx, charge(t, "pi_slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if p.Charges() != 0 {
		t.Fatal("a call cut short must charge nothing")
	}
}
