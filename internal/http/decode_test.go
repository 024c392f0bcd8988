package http

import (
	"reflect"
	"testing"
)

// The one-pass decoder for well-formed bodies must never take a body the
// thorough decoder refuses, nor read it differently. The seeds run as a
// normal test; `go test -fuzz FuzzWellFormedChargeAgreesWithTheThoroughDecoder
// ./internal/http` searches further.
func FuzzWellFormedChargeAgreesWithTheThoroughDecoder(f *testing.F) {
	for _, seed := range []string{
		`{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1"}`,
		`{ "externalPaymentId": "pi_\u0031", "paymentProvider": "sandbox", "currency": "RUB", "amount": "100.5", "customerId": 42, "orderId": 1001 }`,
		`{"orderId":1002,"orderId":1001,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`,
		`{"orderId":"1001","customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`,
		`{"orderId":1e3,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`,
		`{"orderId":1001,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x","meta":{"a":1,"a":2}}`,
		`{"orderId":1001,"customerId":42,"amount":1,"currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x"}`,
		`{"orderId":null,"customerId":42}`,
		`{"orderId":1001}{}`,
		`[1]`,
		`{}`,
		`{"orderId":99999999999999999999}`,
		`{"orderId":1001,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"x",}`,
	} {
		f.Add([]byte(seed))
	}
	h := &paymentHandlers{validate: newValidator()}
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ok := decodeWellFormedCharge(body)
		if !ok {
			return
		}
		thorough, err := decodeReportingEverything[chargeRequest](h, body)
		if errs := h.validateFields(&fast, nil); len(errs) > 0 {
			// Both must refuse it, the thorough one naming the fields.
			if err == nil {
				t.Fatalf("%s: the thorough decoder took a body the fast one found invalid: %v", body, errs)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: the fast decoder took a body the thorough one refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, thorough) {
			t.Fatalf("%s: decoded differently:\nfast     %+v\nthorough %+v", body, fast, thorough)
		}
	})
}
