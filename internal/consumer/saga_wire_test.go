package consumer

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
)

const (
	testSaga  = "0193a5d2-7c1e-7b3a-9f4e-2d6c8b1a0e5f"
	testEvent = "0193a5d2-7c1e-7b3a-9f4e-2d6c8b1a0e60"
)

// chargeJSON is a valid ChargeOrder.v1 with one member replaced (or, with
// value "", removed).
func chargeJSON(t *testing.T, member string, value any) []byte {
	t.Helper()
	m := map[string]any{
		"eventId": testEvent, "eventType": "ChargeOrder.v1", "sagaId": testSaga, "stepName": "charge-payment",
		"orderId": 1001, "customerId": 42, "amount": "100.50", "currency": "RUB", "paymentProvider": "sandbox",
		"externalPaymentId": "pi_1", "occurredAt": "2026-12-04T10:00:00Z",
	}
	if member != "" {
		if value == "" {
			delete(m, member)
		} else {
			m[member] = value
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeSagaCommand(t *testing.T) {
	compensation := []byte(`{"eventId":"` + testEvent + `","eventType":"CompensateCharge.v1","sagaId":"` + testSaga +
		`","stepName":"refund-payment","compensates":"charge-payment","occurredAt":"2026-12-04T10:00:00+03:00"}`)
	tests := []struct {
		name       string
		value      []byte
		wantReason string // "" for a valid command
		wantStep   bool   // a poison command whose step can be named
	}{
		{"a charge", chargeJSON(t, "", nil), "", false},
		{"a compensation", compensation, "", false},
		{"not JSON", []byte(`{`), ReasonInvalidJSON, false},
		{"a repeated member", []byte(`{"sagaId":"` + testSaga + `","sagaId":"` + testSaga + `"}`), ReasonDuplicateKey, false},
		{"no sagaId", chargeJSON(t, "sagaId", ""), ReasonInvalidField, false},
		{"a nil sagaId", chargeJSON(t, "sagaId", uuid.Nil.String()), ReasonInvalidField, false},
		{"no stepName", chargeJSON(t, "stepName", ""), ReasonInvalidField, false},
		{"no eventId", chargeJSON(t, "eventId", ""), ReasonInvalidEventID, true},
		{"an unknown eventType", chargeJSON(t, "eventType", "ChargeOrder.v2"), ReasonUnknownEventType, true},
		{"an amount as a number", chargeJSON(t, "amount", 100.5), ReasonInvalidAmount, true},
		{"a zero amount", chargeJSON(t, "amount", "0"), ReasonInvalidAmount, true},
		{"a hostile amount", chargeJSON(t, "amount", "1e-10000"), ReasonInvalidAmount, true},
		{"five fraction digits", chargeJSON(t, "amount", "1.00001"), ReasonInvalidAmount, true},
		{"no currency", chargeJSON(t, "currency", ""), ReasonInvalidField, true},
		{"no orderId", chargeJSON(t, "orderId", ""), ReasonInvalidField, true},
		{"no externalPaymentId", chargeJSON(t, "externalPaymentId", ""), ReasonInvalidField, true},
		{"a bad occurredAt", chargeJSON(t, "occurredAt", "yesterday"), ReasonInvalidField, true},
		{"a captureMethod not known", chargeJSON(t, "captureMethod", "later"), ReasonInvalidField, true},
		{"a captureMethod not a string", chargeJSON(t, "captureMethod", true), ReasonInvalidField, true},
		{"a compensation of nothing", bytes.Replace(compensation, []byte(`"compensates":"charge-payment"`), []byte(`"compensates":""`), 1), ReasonInvalidField, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, bad := decodeSagaCommand(tc.value)
			switch {
			case tc.wantReason == "" && bad != nil:
				t.Fatalf("refused a valid command: %v", bad.PoisonError)
			case tc.wantReason == "":
				if cmd.step().SagaID.String() != testSaga || (cmd.charge == nil) == (cmd.compensate == nil) {
					t.Fatalf("decoded %+v", cmd)
				}
			case bad == nil:
				t.Fatalf("accepted it: %+v", cmd)
			case bad.Reason != tc.wantReason || (bad.step != nil) != tc.wantStep:
				t.Fatalf("reason %s (step named: %v), want %s (step named: %v): %s", bad.Reason, bad.step != nil, tc.wantReason, tc.wantStep, bad.Detail)
			}
		})
	}
}

// A reply is stored as its message, and read back as it was: the same
// fields, the same eventId, the same bytes when encoded again.
func TestSagaRepliesRoundTrip(t *testing.T) {
	step := app.SagaStep{SagaID: uuid.MustParse(testSaga), Name: "refund-payment"}
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456000, time.UTC)
	tests := []app.SagaReply{
		{Type: app.ReplyCharged, PaymentID: 7, OrderID: 1001, Amount: decimal.RequireFromString("100.5"), Currency: "RUB"},
		{Type: app.ReplyCompensated, PaymentID: 7, Amount: decimal.RequireFromString("100.50"), Currency: "RUB", Compensates: "charge-payment", RefundID: 3},
		{Type: app.ReplyCompensated, Compensates: "charge-payment"},
		{Type: app.ReplyAuthorized, PaymentID: 7, OrderID: 1001, Amount: decimal.RequireFromString("100.50"), Currency: "RUB"},
		{Type: app.ReplyCompensated, PaymentID: 7, Compensates: "charge-payment", Voided: true},
		{Type: app.ReplyFailed, Code: "order-not-found", Detail: "not projected"},
		{Type: app.ReplyCancelled, CompensatedBy: "refund-payment"},
		{Type: app.ReplyRejected, Code: "step-reused", Detail: "another command"},
	}
	for _, r := range tests {
		t.Run(string(r.Type), func(t *testing.T) {
			r.EventID, r.Step, r.OccurredAt = uuid.MustParse(testEvent), step, at
			stored, err := SagaReplies{}.EncodeSagaReply(r)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Publish == nil || stored.Publish.EventID != r.EventID || stored.Publish.Key != testSaga || stored.Publish.EventType != string(r.Type) {
				t.Fatalf("publication %+v", stored.Publish)
			}
			got, again, err := SagaReplies{}.DecodeSagaReply(app.StoredResponse{StatusCode: stored.StatusCode, Body: stored.Body})
			if err != nil {
				t.Fatal(err)
			}
			if *again.Publish != *stored.Publish {
				t.Fatalf("publication read back %+v, stored %+v", again.Publish, stored.Publish)
			}
			reencoded, err := SagaReplies{}.EncodeSagaReply(got)
			if err != nil || !bytes.Equal(reencoded.Body, stored.Body) {
				t.Fatalf("encoded again: %s, first %s (%v)", reencoded.Body, stored.Body, err)
			}
			if got.Voided != r.Voided {
				t.Fatalf("voided read back %v, stored %v: %s", got.Voided, r.Voided, stored.Body)
			}
			var body map[string]any
			_ = json.Unmarshal(stored.Body, &body)
			_, hasAmount := body["amount"]
			if hasAmount != (r.Type == app.ReplyCharged || r.Type == app.ReplyAuthorized || r.Type == app.ReplyCompensated) {
				t.Fatalf("%s: amount present %v: %s", r.Type, hasAmount, stored.Body)
			}
		})
	}
	if _, _, err := (SagaReplies{}).DecodeSagaReply(app.StoredResponse{Body: []byte(`{"id":1,"status":"SUCCEEDED"}`)}); err == nil {
		t.Fatal("an HTTP answer read as a reply")
	}
}

// A ChargeOrder.v1's captureMethod: absent or automatic is a one-step
// charge (whose content hash is the one steps had before there was a
// choice), manual an authorization.
func TestDecodeSagaChargeCaptureMethod(t *testing.T) {
	hashOf := func(c *app.SagaCharge) string {
		return app.ChargeCommand{Scope: app.SagaStepScope("saga", c.Step), Charge: c.Charge, Operation: app.OperationSagaCharge}.Hash()
	}
	decode := func(value []byte) *app.SagaCharge {
		t.Helper()
		cmd, bad := decodeSagaCommand(value)
		if bad != nil || cmd.charge == nil {
			t.Fatalf("decoded %+v, %v", cmd, bad)
		}
		return cmd.charge
	}
	absent, automatic, manual := decode(chargeJSON(t, "", nil)), decode(chargeJSON(t, "captureMethod", "automatic")), decode(chargeJSON(t, "captureMethod", "manual"))
	if absent.Charge.Manual() || automatic.Charge.Manual() || !manual.Charge.Manual() {
		t.Fatalf("manual: absent %v, automatic %v, manual %v", absent.Charge.Manual(), automatic.Charge.Manual(), manual.Charge.Manual())
	}
	if hashOf(absent) != hashOf(automatic) || hashOf(absent) == hashOf(manual) {
		t.Fatalf("hashes: absent %s, automatic %s, manual %s: want absent = automatic != manual", hashOf(absent), hashOf(automatic), hashOf(manual))
	}
}
