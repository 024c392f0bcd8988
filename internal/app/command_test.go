package app_test

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

func command(t *testing.T, op string, order int64, amount, currency, external string) app.ChargeCommand {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString(amount), domain.Currency(currency))
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(domain.OrderID(order), 42, m, "sandbox", domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "k"}, Charge: c, Operation: op}
}

func TestCommandHash(t *testing.T) {
	t.Parallel()
	base := command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1").Hash()
	if len(base) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", base)
	}
	tests := []struct {
		name string
		cmd  app.ChargeCommand
		same bool
	}{
		{"same values", command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1"), true},
		{"equivalent amount", command(t, "POST /payments", 1001, "100.5000", "RUB", "pi_1"), true},
		{"other endpoint", command(t, "POST /refunds", 1001, "100.50", "RUB", "pi_1"), false},
		{"other order", command(t, "POST /payments", 1002, "100.50", "RUB", "pi_1"), false},
		{"other amount", command(t, "POST /payments", 1001, "100.51", "RUB", "pi_1"), false},
		{"other currency", command(t, "POST /payments", 1001, "100.50", "EUR", "pi_1"), false},
		{"other external id", command(t, "POST /payments", 1001, "100.50", "RUB", "pi_2"), false},
		{"a payment method", withPaymentMethod(command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1"), "pm_card_visa"), false},
	}
	for _, tc := range tests {
		if got := tc.cmd.Hash() == base; got != tc.same {
			t.Errorf("%s: same hash = %v, want %v", tc.name, got, tc.same)
		}
	}
	// The client's scope is not part of the command: it is the record's key.
	other := command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1")
	other.Scope = app.IdempotencyScope{ClientID: "d", Key: "z"}
	if other.Hash() != base {
		t.Error("scope changed the command hash")
	}
	// Two payment methods are two commands; the same one is one.
	visa := withPaymentMethod(command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1"), "pm_card_visa")
	if visa.Hash() != withPaymentMethod(command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1"), "pm_card_visa").Hash() ||
		visa.Hash() == withPaymentMethod(command(t, "POST /payments", 1001, "100.50", "RUB", "pi_1"), "pm_card_mastercard").Hash() {
		t.Error("the payment method is not hashed as part of the command")
	}
}

func withPaymentMethod(c app.ChargeCommand, pm string) app.ChargeCommand {
	c.Charge.PaymentMethod = pm
	return c
}
