package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// FuzzDecodeCharge feeds arbitrary bodies to the charge request's decoding
// path (size limit, repeated names through strictjson, strict field-by-field
// decoding, validation, domain constructors). Whatever the body:
//
//   - it never panics, and an error is always a 400 or 413 problem;
//   - a body that names a field twice, at any depth, is refused;
//   - an accepted body is valid JSON, and its charge survives a round trip:
//     the charge written back as a request decodes to a charge with the
//     same command hash.
//
// Without -fuzz it runs over the seeds below and testdata/fuzz.
func FuzzDecodeCharge(f *testing.F) {
	for _, seed := range []string{
		`{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1"}`,
		`{"orderId":1001,"customerId":42,"amount":"100.5","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","orderId":1002}`,
		`{"orderId":1,"customerId":1,"amount":"999999999999999.9999","currency":"EUR","paymentProvider":"sandbox","externalPaymentId":"x"}`,
		`{"orderId":"1","customerId":-1,"amount":100.5,"currency":"rub","paymentProvider":"paypal","externalPaymentId":""}`,
		`{"orderId":1,"customerId":1,"amount":"0.00001","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"a","extra":{"a":1,"a":2}}`,
		`{"order\u0049d":1,"orderId":2}`,
		`[1,2,3]`, `null`, `{}`, `{"orderId":1e400}`, `{"orderId":9223372036854775808}`, ``,
	} {
		f.Add([]byte(seed))
	}
	h := &paymentHandlers{validate: newValidator([]domain.ProviderName{"sandbox"})}
	e := echo.New()
	decode := func(body []byte) (domain.Charge, error) {
		req := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(body))
		return h.decodeCharge(e.NewContext(req, httptest.NewRecorder()))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		charge, err := decode(body)
		if err != nil {
			var p *Problem
			if !errors.As(err, &p) || (p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge) {
				t.Fatalf("body %q: error %v is not a 400 or 413 problem", body, err)
			}
			return
		}
		if len(strictjson.DuplicateKeys(body)) > 0 {
			t.Fatalf("body %q names a field twice and was accepted", body)
		}
		if !json.Valid(body) {
			t.Fatalf("body %q is not JSON and was accepted", body)
		}
		again, err := json.Marshal(map[string]any{
			"orderId": charge.OrderID, "customerId": charge.CustomerID, "amount": charge.Amount.AmountString(),
			"currency": charge.Amount.Currency(), "paymentProvider": charge.Provider, "externalPaymentId": charge.ExternalPaymentID,
		})
		if err != nil {
			t.Fatal(err)
		}
		back, err := decode(again)
		if err != nil {
			t.Fatalf("body %q decoded to %+v, which written back as %s is refused: %v", body, charge, again, err)
		}
		hash := func(c domain.Charge) string {
			return app.ChargeCommand{Charge: c, Operation: chargeOperation}.Hash()
		}
		if hash(back) != hash(charge) {
			t.Fatalf("body %q: the round trip %s changed the command: %+v vs %+v", body, again, charge, back)
		}
	})
}
