package app_test

import (
	"testing"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// fuzzCommand builds a command from raw values, or reports that the domain
// refuses them.
func fuzzCommand(op string, order, customer int64, amount, currency, provider, external string) (app.ChargeCommand, bool) {
	if len(amount) > 40 {
		return app.ChargeCommand{}, false // the API refuses longer texts before any arithmetic
	}
	d, err := decimal.NewFromString(amount)
	if err != nil {
		return app.ChargeCommand{}, false
	}
	m, err := domain.NewMoney(d, domain.Currency(currency))
	if err != nil {
		return app.ChargeCommand{}, false
	}
	c, err := domain.NewCharge(domain.OrderID(order), domain.CustomerID(customer), m, domain.ProviderName(provider), domain.ExternalPaymentID(external))
	if err != nil {
		return app.ChargeCommand{}, false
	}
	return app.ChargeCommand{Charge: c, Operation: op}, true
}

// sameCommand is what the hash must stand for: the same operation, order,
// customer, amount (as a number: 100.5 is 100.50), currency, provider and
// external payment. The client's key is not part of it.
func sameCommand(a, b app.ChargeCommand) bool {
	return a.Operation == b.Operation && a.Charge.OrderID == b.Charge.OrderID && a.Charge.CustomerID == b.Charge.CustomerID &&
		a.Charge.Amount.Amount().Equal(b.Charge.Amount.Amount()) && a.Charge.Amount.Currency() == b.Charge.Amount.Currency() &&
		a.Charge.Provider == b.Charge.Provider && a.Charge.ExternalPaymentID == b.Charge.ExternalPaymentID
}

// FuzzCommandHash checks the command hash of R-DIST-IDEM-3 as a property,
// over pairs of arbitrary commands: equal commands hash equal, whatever the
// key and however the amount is written ("100.5", "100.50", "1.005e2");
// different commands hash differently (the fields are length-prefixed, so
// no two field lists share a form: "ab"+"c" is not "a"+"bc").
func FuzzCommandHash(f *testing.F) {
	f.Add("POST /payments", int64(1001), int64(42), "100.50", "RUB", "sandbox", "pi_1",
		"POST /payments", int64(1001), int64(42), "100.5", "RUB", "sandbox", "pi_1")
	f.Add("POST /payments", int64(1), int64(12), "1", "RUB", "sandbox", "pi",
		"POST /payments", int64(11), int64(2), "1", "RUB", "sandbox", "pi")
	f.Add("POST /payments", int64(1), int64(1), "1", "RUB", "sand", "boxpi",
		"POST /payments", int64(1), int64(1), "1", "RUB", "sandbox", "pi")
	f.Add("a", int64(7), int64(7), "0.0001", "EUR", "sandbox", "x", "a", int64(7), int64(7), "1e-4", "EUR", "sandbox", "x")
	f.Fuzz(func(t *testing.T, op1 string, order1, customer1 int64, amount1, currency1, provider1, external1 string,
		op2 string, order2, customer2 int64, amount2, currency2, provider2, external2 string) {
		a, ok := fuzzCommand(op1, order1, customer1, amount1, currency1, provider1, external1)
		if !ok {
			return
		}
		// The same command, another key, the amount written with two more
		// trailing zeros: the same hash.
		a.Scope = app.IdempotencyScope{ClientID: "c1", Key: "k1"}
		padded := a.Charge.Amount.Amount().StringFixed(a.Charge.Amount.Amount().Exponent()*-1 + 2)
		same, ok := fuzzCommand(op1, order1, customer1, padded, currency1, provider1, external1)
		if !ok {
			t.Fatalf("%q with trailing zeros (%q) is refused", amount1, padded)
		}
		same.Scope = app.IdempotencyScope{ClientID: "c2", Key: "k2"}
		if a.Hash() != same.Hash() {
			t.Fatalf("equal commands hash differently: %+v / %+v", a, same)
		}
		b, ok := fuzzCommand(op2, order2, customer2, amount2, currency2, provider2, external2)
		if !ok {
			return
		}
		if got, want := a.Hash() == b.Hash(), sameCommand(a, b); got != want {
			t.Fatalf("hash equal = %v, commands equal = %v:\n%+v\n%+v", got, want, a, b)
		}
	})
}
