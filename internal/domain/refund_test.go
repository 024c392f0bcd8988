package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/domain"
)

func succeededPayment(t *testing.T, amount string, c domain.Currency) domain.Payment {
	t.Helper()
	return domain.Payment{ID: 7, ClientID: "a", Charge: mustCharge(t, 1001, 42, amount, c, "pi_1"), Status: domain.PaymentSucceeded}
}

func TestNewRefundValidates(t *testing.T) {
	t.Parallel()
	p := succeededPayment(t, "100.00", "RUB")
	unstored := p
	unstored.ID = 0
	tests := []struct {
		name     string
		payment  domain.Payment
		amount   domain.Money
		external domain.ExternalRefundID
		wantErr  bool
	}{
		{"part of the payment", p, mustMoney(t, "10.00", "RUB"), "re_1", false},
		{"all of the payment", p, mustMoney(t, "100", "RUB"), "re_1", false},
		{"128 characters", p, mustMoney(t, "1", "RUB"), domain.ExternalRefundID(strings.Repeat("x", 128)), false},
		{"spaces and punctuation", p, mustMoney(t, "1", "RUB"), "refund #1: partial", false},
		{"more than the payment", p, mustMoney(t, "100.01", "RUB"), "re_1", true},
		{"another currency", p, mustMoney(t, "10", "EUR"), "re_1", true},
		{"payment not stored", unstored, mustMoney(t, "10", "RUB"), "re_1", true},
		{"empty external id", p, mustMoney(t, "10", "RUB"), "", true},
		{"external id too long", p, mustMoney(t, "10", "RUB"), domain.ExternalRefundID(strings.Repeat("x", 129)), true},
		{"control character", p, mustMoney(t, "10", "RUB"), "re\n1", true},
		{"not ASCII", p, mustMoney(t, "10", "RUB"), "возврат", true},
	}
	for _, tc := range tests {
		r, err := domain.NewRefund(tc.payment, tc.amount, tc.external)
		switch {
		case tc.wantErr && !errors.Is(err, domain.ErrInvalid):
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		case !tc.wantErr && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.wantErr && (r.Status != domain.RefundPending || r.PaymentID != p.ID || r.Provider != "sandbox" || !r.Amount.Equal(tc.amount)):
			t.Errorf("%s: built %+v", tc.name, r)
		}
	}
}

func TestRefundStatusFinal(t *testing.T) {
	t.Parallel()
	for status, want := range map[domain.RefundStatus]bool{
		domain.RefundPending: false, domain.RefundSucceeded: true, domain.RefundDeclined: true, domain.RefundFailed: true,
	} {
		if got := status.Final(); got != want {
			t.Errorf("%s.Final() = %v, want %v", status, got, want)
		}
	}
}

func TestRefundIsSameRefund(t *testing.T) {
	t.Parallel()
	p := succeededPayment(t, "100.00", "RUB")
	refund := func(amount string, external domain.ExternalRefundID) domain.Refund {
		t.Helper()
		r, err := domain.NewRefund(p, mustMoney(t, amount, "RUB"), external)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := refund("10.00", "re_1")
	stored := r
	stored.ID, stored.Status = 3, domain.RefundSucceeded
	otherPayment := r
	otherPayment.PaymentID = 8
	tests := []struct {
		name  string
		other domain.Refund
		want  bool
	}{
		{"same, other scale", refund("10", "re_1"), true},
		{"the stored row, decided", stored, true},
		{"other amount", refund("10.01", "re_1"), false},
		{"other external id", refund("10.00", "re_2"), false},
		{"other payment", otherPayment, false},
	}
	for _, tc := range tests {
		if got := r.IsSameRefund(tc.other); got != tc.want {
			t.Errorf("%s: IsSameRefund = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The refund's provider key is the business operation, like the charge's,
// and never equal to a charge's key: not even for a charge whose external
// payment id is the refund's external refund id.
func TestRefundProviderIdempotencyKey(t *testing.T) {
	t.Parallel()
	p := succeededPayment(t, "100.00", "RUB")
	a, err := domain.NewRefund(p, mustMoney(t, "10.00", "RUB"), "pi_1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := domain.NewRefund(p, mustMoney(t, "10", "RUB"), "pi_1")
	if err != nil {
		t.Fatal(err)
	}
	if a.ProviderIdempotencyKey() != b.ProviderIdempotencyKey() || a.ProviderIdempotencyKey() != "refund:sandbox:pi_1" {
		t.Fatalf("keys %q %q", a.ProviderIdempotencyKey(), b.ProviderIdempotencyKey())
	}
	if a.ProviderIdempotencyKey() == p.Charge.ProviderIdempotencyKey() {
		t.Fatalf("the refund's key %q is its payment's charge key", a.ProviderIdempotencyKey())
	}
}
