package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

func TestNewMoney(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount   string
		currency domain.Currency
		valid    bool
	}{
		{"100.50", "RUB", true},
		{"0.0001", "RUB", true},
		{"999999999999999.9999", "RUB", true},
		{"1000000000000000", "RUB", false}, // 16 integer digits
		{"1.00001", "RUB", false},          // 5 fraction digits
		{"1.00000", "RUB", true},           // trailing zeros are not digits of value
		{"0", "RUB", false},
		{"-1", "RUB", false},
		{"1", "rub", false},
		{"1", "RU", false},
		{"1", "RUBL", false},
	}
	for _, tc := range tests {
		t.Run(tc.amount+" "+string(tc.currency), func(t *testing.T) {
			t.Parallel()
			_, err := domain.NewMoney(decimal.RequireFromString(tc.amount), tc.currency)
			if tc.valid && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if !tc.valid && !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestMoneyAmountString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount   string
		currency domain.Currency
		want     string
	}{
		{"100.5", "RUB", "100.50"},
		{"100.5000", "RUB", "100.50"},
		{"100.1234", "RUB", "100.1234"},
		{"100.120", "RUB", "100.12"},
		{"500", "JPY", "500"},
		{"500.5", "JPY", "500.5"},
		{"1.5", "KWD", "1.500"},
	}
	for _, tc := range tests {
		m, err := domain.NewMoney(decimal.RequireFromString(tc.amount), tc.currency)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.AmountString(); got != tc.want {
			t.Errorf("%s %s: AmountString() = %q, want %q", tc.amount, tc.currency, got, tc.want)
		}
	}
}

func TestMoneyEqualIgnoresScale(t *testing.T) {
	t.Parallel()
	a := mustMoney(t, "100.5", "RUB")
	if !a.Equal(mustMoney(t, "100.5000", "RUB")) {
		t.Error("100.5 RUB != 100.5000 RUB")
	}
	if a.Equal(mustMoney(t, "100.5", "EUR")) {
		t.Error("100.5 RUB == 100.5 EUR")
	}
}

func mustMoney(t *testing.T, amount string, c domain.Currency) domain.Money {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString(amount), c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// NewMoney bounds its work by the decimal's representation before any
// arithmetic: a decimal built by some caller from hostile input (an
// exponent of -10000 is ten thousand fraction digits to check, each check a
// big-number operation) is refused as cheaply as a valid amount is accepted.
// Allocations measure the big-number work; BenchmarkNewMoneyWorstCase shows
// the time. Not parallel: AllocsPerRun counts the whole process.
func TestNewMoneyWorkIsBounded(t *testing.T) {
	hostile := map[string]decimal.Decimal{
		"1e-10000":             decimal.New(1, -10000),
		"1e10000":              decimal.New(1, 10000),
		"1 with 9000 zeros":    decimal.RequireFromString("1." + strings.Repeat("0", 9000)),
		"10,001-digit integer": decimal.RequireFromString(strings.Repeat("9", 10001)),
	}
	for name, d := range hostile {
		if _, err := domain.NewMoney(d, "RUB"); !errors.Is(err, domain.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if allocs := testing.AllocsPerRun(5, func() { _, _ = domain.NewMoney(d, "RUB") }); allocs > 10 {
			t.Errorf("%s: %v allocations, want at most 10", name, allocs)
		}
	}
}

func BenchmarkNewMoneyWorstCase(b *testing.B) {
	for name, d := range map[string]decimal.Decimal{
		"1e-10000": decimal.New(1, -10000),
		"valid":    decimal.RequireFromString("123456789012345.1234"),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = domain.NewMoney(d, "RUB")
			}
		})
	}
}

// An amount goes to a provider that counts in minor units only when it
// can be written there exactly: by each currency's exponent, never
// rounded.
func TestMoneyInMinorUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount   string
		currency domain.Currency
		want     int64
		ok       bool
	}{
		{"10.50", "EUR", 1050, true},
		{"10.5", "EUR", 1050, true},
		{"0.01", "USD", 1, true},
		{"10.505", "EUR", 0, false},
		{"10.5000", "EUR", 1050, true}, // trailing zeros are not digits of value
		{"500", "JPY", 500, true},
		{"500.5", "JPY", 0, false},
		{"1.5", "KWD", 1500, true},
		{"1.0005", "KWD", 0, false},
		{"1.2345", "CLF", 12345, true},
		{"999999999999999.9999", "CLF", 0, false}, // beyond an int64 in minor units
		{"92233720368547758.07", "USD", 0, false}, // NewMoney refuses it anyway; InMinorUnits on its own too
		{"999999999999999.99", "USD", 99999999999999999, true},
	}
	for _, tc := range tests {
		t.Run(tc.amount+" "+string(tc.currency), func(t *testing.T) {
			t.Parallel()
			m, err := domain.NewMoney(decimal.RequireFromString(tc.amount), tc.currency)
			if err != nil {
				if tc.ok {
					t.Fatal(err)
				}
				return
			}
			got, ok := m.InMinorUnits()
			if ok != tc.ok || got != tc.want {
				t.Fatalf("InMinorUnits = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
			if !ok {
				return
			}
			back, err := domain.MoneyOfMinorUnits(got, tc.currency)
			if err != nil || !back.Equal(m) {
				t.Fatalf("MoneyOfMinorUnits(%d) = %v, %v; want %s", got, back.AmountString(), err, m.AmountString())
			}
		})
	}
}
