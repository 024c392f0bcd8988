package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/domain"
)

func mustCharge(t *testing.T, order, customer int64, amount string, c domain.Currency, external string) domain.Charge {
	t.Helper()
	ch, err := domain.NewCharge(domain.OrderID(order), domain.CustomerID(customer), mustMoney(t, amount, c), "sandbox", domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestNewChargeValidates(t *testing.T) {
	t.Parallel()
	m := mustMoney(t, "1", "RUB")
	tests := []struct {
		name     string
		order    domain.OrderID
		customer domain.CustomerID
		provider domain.ProviderName
		external domain.ExternalPaymentID
	}{
		{"zero order", 0, 1, "sandbox", "x"},
		{"negative customer", 1, -1, "sandbox", "x"},
		{"no provider", 1, 1, "", "x"},
		{"empty external id", 1, 1, "sandbox", ""},
		{"external id too long", 1, 1, "sandbox", domain.ExternalPaymentID(strings.Repeat("x", 129))},
	}
	for _, tc := range tests {
		if _, err := domain.NewCharge(tc.order, tc.customer, m, tc.provider, tc.external); !errors.Is(err, domain.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestOrderAccepts(t *testing.T) {
	t.Parallel()
	order, err := domain.NewOrder(1001, 42, mustMoney(t, "100.50", "RUB"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		charge domain.Charge
		want   error
	}{
		{"exact", mustCharge(t, 1001, 42, "100.50", "RUB", "x"), nil},
		{"same amount, other scale", mustCharge(t, 1001, 42, "100.5", "RUB", "x"), nil},
		{"other order", mustCharge(t, 1002, 42, "100.50", "RUB", "x"), domain.ErrOrderMismatch},
		{"other customer", mustCharge(t, 1001, 43, "100.50", "RUB", "x"), domain.ErrOrderMismatch},
		{"other amount", mustCharge(t, 1001, 42, "100.51", "RUB", "x"), domain.ErrOrderMismatch},
		{"other currency", mustCharge(t, 1001, 42, "100.50", "EUR", "x"), domain.ErrOrderMismatch},
	}
	for _, tc := range tests {
		if err := order.Accepts(tc.charge); !errors.Is(err, tc.want) {
			t.Errorf("%s: Accepts = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestPaymentIsSameCharge(t *testing.T) {
	t.Parallel()
	p := domain.Payment{ID: 1, ClientID: "a", Charge: mustCharge(t, 1001, 42, "100.50", "RUB", "pi_1"), Status: domain.PaymentSucceeded}
	tests := []struct {
		name   string
		client domain.ClientID
		charge domain.Charge
		want   bool
	}{
		{"same", "a", mustCharge(t, 1001, 42, "100.5", "RUB", "pi_1"), true},
		{"other client", "b", mustCharge(t, 1001, 42, "100.50", "RUB", "pi_1"), false},
		{"other order", "a", mustCharge(t, 1002, 42, "100.50", "RUB", "pi_1"), false},
		{"other amount", "a", mustCharge(t, 1001, 42, "1", "RUB", "pi_1"), false},
	}
	for _, tc := range tests {
		if got := p.IsSameCharge(tc.client, tc.charge); got != tc.want {
			t.Errorf("%s: IsSameCharge = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestProviderIdempotencyKeyIsTheBusinessOperation(t *testing.T) {
	t.Parallel()
	a := mustCharge(t, 1001, 42, "100.50", "RUB", "pi_1")
	b := mustCharge(t, 1001, 42, "100.5", "RUB", "pi_1")
	if a.ProviderIdempotencyKey() != b.ProviderIdempotencyKey() || a.ProviderIdempotencyKey() != "sandbox:pi_1" {
		t.Fatalf("keys %q %q", a.ProviderIdempotencyKey(), b.ProviderIdempotencyKey())
	}
}
