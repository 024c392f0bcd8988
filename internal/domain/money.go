package domain

import (
	"fmt"
	"math"

	"github.com/shopspring/decimal"
)

// Money limits follow the column type numeric(19,4): 15 integer digits and
// 4 fraction digits.
const (
	MaxFractionDigits = 4
	MaxIntegerDigits  = 15
)

// Currency is an ISO 4217 alphabetic code, such as RUB.
type Currency string

// ParseCurrency accepts three upper-case ASCII letters. Whether the code is
// an assigned ISO 4217 code is checked at the edge (the HTTP validator keeps
// the list); the domain guarantees the shape the database column holds.
func ParseCurrency(code string) (Currency, error) {
	if len(code) != 3 {
		return "", fmt.Errorf("%w: currency must be a 3-letter ISO 4217 code", ErrInvalid)
	}
	for _, r := range code {
		if r < 'A' || r > 'Z' {
			return "", fmt.Errorf("%w: currency must be a 3-letter upper-case ISO 4217 code", ErrInvalid)
		}
	}
	return Currency(code), nil
}

// minorUnits lists the ISO 4217 currencies whose minor unit (exponent) is
// not 2 digits: the zero-decimal ones (JPY), the three-decimal ones (KWD)
// and the four-decimal funds codes. A provider that counts in minor units
// (Stripe) is sent 500 JPY as 500 and 1.500 KWD as 1500.
var minorUnits = map[Currency]int32{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	"CLF": 4, "UYW": 4,
}

// MinorUnits is the number of fraction digits the currency is written with.
func (c Currency) MinorUnits() int32 {
	if n, ok := minorUnits[c]; ok {
		return n
	}
	return 2
}

// InMinorUnits is the amount in the currency's minor units, as a provider
// that counts in them takes it: 10.50 EUR is 1050, 500 JPY is 500, 1.5
// KWD is 1500. ok is false when that cannot be written exactly, so nothing
// is rounded on its way to a provider: 10.505 EUR, 500.5 JPY, or an amount
// beyond an int64 in minor units.
func (m Money) InMinorUnits() (units int64, ok bool) {
	exp := m.currency.MinorUnits()
	if fractionDigits(m.amount) > exp {
		return 0, false
	}
	scaled := m.amount.Shift(exp)
	if !scaled.IsInteger() || scaled.GreaterThan(maxMinorUnits) {
		return 0, false
	}
	return scaled.IntPart(), true
}

// maxMinorUnits is the largest amount in minor units an int64 holds.
var maxMinorUnits = decimal.NewFromInt(math.MaxInt64)

// MoneyOfMinorUnits is InMinorUnits' inverse: units of currency's minor
// unit as Money (1050 EUR cents is 10.50 EUR), validated as NewMoney does.
func MoneyOfMinorUnits(units int64, currency Currency) (Money, error) {
	return NewMoney(decimal.New(units, -currency.MinorUnits()), currency)
}

// Money is a positive amount in one currency. It is never a float.
type Money struct {
	amount   decimal.Decimal
	currency Currency
}

// Bounds on how an amount is written, checked before any arithmetic on it.
// A decimal is a coefficient and an exponent, and its digit checks below
// cost time in the number of digits the two spell out: 1e-10000 has ten
// thousand fraction digits to look at. No valid amount needs more than 19
// digits; these leave room for trailing zeros.
const (
	maxWrittenFractionDigits = 38
	maxCoefficientBits       = 128 // 10^38 < 2^127
)

// NewMoney validates that amount is positive and fits numeric(19,4).
func NewMoney(amount decimal.Decimal, currency Currency) (Money, error) {
	if !amount.IsPositive() {
		return Money{}, fmt.Errorf("%w: amount must be greater than 0", ErrInvalid)
	}
	// The representation first, in constant time, so a hostile decimal
	// costs no more than a valid one (TestNewMoneyWorkIsBounded).
	switch exp := amount.Exponent(); {
	case exp > MaxIntegerDigits:
		return Money{}, fmt.Errorf("%w: amount has more than %d integer digits", ErrInvalid, MaxIntegerDigits)
	case exp < -maxWrittenFractionDigits:
		return Money{}, fmt.Errorf("%w: amount is written with more than %d fraction digits", ErrInvalid, maxWrittenFractionDigits)
	case amount.Coefficient().BitLen() > maxCoefficientBits:
		return Money{}, fmt.Errorf("%w: amount is written with too many digits", ErrInvalid)
	}
	if fractionDigits(amount) > MaxFractionDigits {
		return Money{}, fmt.Errorf("%w: amount has more than %d fraction digits", ErrInvalid, MaxFractionDigits)
	}
	if len(amount.Truncate(0).String()) > MaxIntegerDigits {
		return Money{}, fmt.Errorf("%w: amount has more than %d integer digits", ErrInvalid, MaxIntegerDigits)
	}
	if _, err := ParseCurrency(string(currency)); err != nil {
		return Money{}, err
	}
	return Money{amount: amount, currency: currency}, nil
}

// Amount returns the amount.
func (m Money) Amount() decimal.Decimal { return m.amount }

// Currency returns the currency.
func (m Money) Currency() Currency { return m.currency }

// Equal compares by value: 100.5 RUB equals 100.5000 RUB.
func (m Money) Equal(o Money) bool {
	return m.currency == o.currency && m.amount.Equal(o.amount)
}

// AmountString formats the amount with the currency's minor units, or with
// more fraction digits when the amount has them: 100.5 RUB is "100.50",
// 100.1234 RUB is "100.1234", 500 JPY is "500". The same value always gives
// the same string, which keeps stored responses byte-stable.
func (m Money) AmountString() string {
	digits := max(m.currency.MinorUnits(), fractionDigits(m.amount))
	return m.amount.StringFixed(digits)
}

// fractionDigits is the number of fraction digits without trailing zeros.
func fractionDigits(d decimal.Decimal) int32 {
	for places := int32(0); ; places++ {
		if d.Truncate(places).Equal(d) {
			return places
		}
	}
}
