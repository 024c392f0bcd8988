package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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
	h := &paymentHandlers{validate: newValidator()}
	e := echo.New()
	decode := func(body []byte) (domain.Charge, error) {
		req := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(body))
		return h.decodeCharge(e.NewContext(req, httptest.NewRecorder()))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		charge, err := decode(body)
		if !acceptedAsARequest(t, body, err) {
			return
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

// FuzzParseIdempotencyKey feeds arbitrary header values to the one parser
// every money command's Idempotency-Key goes through. Whatever the value:
//
//   - it never panics, and an accepted key is 1 to 255 printable ASCII
//     characters;
//   - a bare value (no leading quote) is the key as it is;
//   - a quoted value is accepted only when it is the canonical RFC 8941
//     String of its key, so no two accepted quoted values name one key;
//   - the key written back as a String, or bare, parses to the same key.
//
// Without -fuzz it runs over the seeds below and testdata/fuzz.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, seed := range []string{
		`8e03978e-40d5-43e8-bc93-6894a57f9324`, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`,
		`k`, `"k"`, `""`, `"`, `"k`, `"k"x`, `"k";x=1`, `"k" `, `"a\"b"`, `"a\\b"`, `"a\b"`, `"a\`,
		`a"b`, `"ключ"`, "\"a\tb\"", `"k", "k"`, `k;x=1`, strings.Repeat("k", 255), `"` + strings.Repeat("k", 255) + `"`,
		`"` + strings.Repeat(`\"`, 255) + `"`, `"` + strings.Repeat(`\"`, 256) + `"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, err := parseIdempotencyKey(value)
		if err != nil {
			return
		}
		if len(key) < 1 || len(key) > maxIdempotencyKeyLength {
			t.Fatalf("value %q: key %q has %d characters", value, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("value %q: key %q holds byte %#x", value, key, key[i])
			}
		}
		quoted := sfString(key)
		if !strings.HasPrefix(value, `"`) && key != value {
			t.Fatalf("bare value %q gave key %q", value, key)
		}
		if strings.HasPrefix(value, `"`) && value != quoted {
			t.Fatalf("quoted value %q gave key %q, whose String is %q", value, key, quoted)
		}
		if again, err := parseIdempotencyKey(quoted); err != nil || again != key {
			t.Fatalf("key %q as the String %q parses to %q, %v", key, quoted, again, err)
		}
		if !strings.HasPrefix(key, `"`) {
			if again, err := parseIdempotencyKey(key); err != nil || again != key {
				t.Fatalf("key %q sent bare parses to %q, %v", key, again, err)
			}
		}
	})
}

// sfString writes s as an RFC 8941 String: quoted, with " and \ escaped.
func sfString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// FuzzDecodeRefund feeds arbitrary bodies to the refund request's decoding
// path (the same size limit, repeated-name check, strict decoding and
// validation as a charge's). Whatever the body:
//
//   - it never panics, and an error is always a 400 or 413 problem;
//   - a body that names a field twice is refused;
//   - an accepted body is valid JSON with an amount greater than 0, and its
//     refund survives a round trip with the same command hash.
func FuzzDecodeRefund(f *testing.F) {
	for _, seed := range []string{
		`{"amount":"10.00","externalRefundId":"re_1"}`,
		`{"amount":"10","externalRefundId":"re_1","amount":"20"}`,
		`{"amount":"999999999999999.9999","externalRefundId":"x"}`,
		`{"amount":10,"externalRefundId":""}`,
		`{"amount":"0","externalRefundId":"x","currency":"EUR"}`,
		`{"amount":"1e3","externalRefundId":"\u0000"}`,
		`[1]`, `null`, `{}`, ``,
	} {
		f.Add([]byte(seed))
	}
	h := &paymentHandlers{validate: newValidator()}
	e := echo.New()
	decode := func(body []byte) (app.RefundCommand, error) {
		req := httptest.NewRequest(http.MethodPost, "/payments/1/refunds", bytes.NewReader(body))
		amount, external, err := h.decodeRefund(e.NewContext(req, httptest.NewRecorder()))
		return app.RefundCommand{PaymentID: 1, Amount: amount, ExternalRefundID: external, Operation: refundOperation}, err
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cmd, err := decode(body)
		if !acceptedAsARequest(t, body, err) {
			return
		}
		if !json.Valid(body) || !cmd.Amount.IsPositive() {
			t.Fatalf("body %q was accepted as %+v", body, cmd)
		}
		again, err := json.Marshal(map[string]any{"amount": cmd.Amount.String(), "externalRefundId": cmd.ExternalRefundID})
		if err != nil {
			t.Fatal(err)
		}
		back, err := decode(again)
		if err != nil {
			t.Fatalf("body %q decoded to %+v, which written back as %s is refused: %v", body, cmd, again, err)
		}
		if back.Hash() != cmd.Hash() {
			t.Fatalf("body %q: the round trip %s changed the command: %+v vs %+v", body, again, cmd, back)
		}
	})
}

// acceptedAsARequest checks what every decoder of a command's body owes:
// an error is a 400 or 413 problem, and an accepted body names no field
// twice. It reports whether the body was accepted.
func acceptedAsARequest(t *testing.T, body []byte, err error) bool {
	t.Helper()
	if err != nil {
		var p *Problem
		if !errors.As(err, &p) || (p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge) {
			t.Fatalf("body %q: error %v is not a 400 or 413 problem", body, err)
		}
		return false
	}
	if len(strictjson.DuplicateKeys(body)) > 0 {
		t.Fatalf("body %q names a field twice and was accepted", body)
	}
	return true
}
