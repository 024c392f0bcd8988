package asyncapitest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

const (
	eventID = "019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13"
	sagaID  = "019ad4c1-0000-7000-8000-000000000001"
)

// sample is one valid record of a message, and what the contract says of
// its value: the members it requires, and whether it takes members it does
// not name.
type sample struct {
	channel  string
	key      string
	headers  map[string]string
	value    string
	required []string
	// open: unknown members are allowed (a producer that is not ours).
	open bool
}

func (s sample) name() string {
	var v map[string]any
	_ = json.Unmarshal([]byte(s.value), &v)
	if typ, ok := v["eventType"].(string); ok {
		return s.channel + "/" + typ
	}
	return s.channel
}

func headersOf(typ string) map[string]string {
	return map[string]string{"eventId": eventID, "eventType": typ}
}

var common = []string{"eventId", "eventType", "sagaId", "stepName", "occurredAt"}

// samples has a valid record of every message of the document.
var samples = []sample{
	{
		channel: "order.events", key: "1001",
		headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		value: `{"eventId":"` + eventID + `","sagaId":"` + sagaID + `","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,` +
			`"amount":"100.50","currency":"RUB","occurredAt":"2026-11-30T10:00:00.123456789+03:00"}`,
		required: []string{"eventId", "eventType", "orderId", "customerId", "amount", "occurredAt"},
		open:     true,
	},
	{
		channel: "order.events.DLT", key: "k",
		headers: map[string]string{"traceparent": "00-abc", "x-dlt-error-code": "invalid-json", "x-dlt-error-message": "unexpected end of JSON input",
			"x-dlt-original-topic": "order.events", "x-dlt-original-partition": "0", "x-dlt-original-offset": "17", "x-dlt-consumer-group": "order-projection"},
		value: `{"eventId": "0193a3c8-`,
	},
	{
		channel: "payment.events", key: "1001", headers: headersOf("PaymentSucceeded.v1"),
		value: `{"eventId":"` + eventID + `","sagaId":"` + sagaID + `","eventType":"PaymentSucceeded.v1","paymentId":7,"orderId":1001,"customerId":42,` +
			`"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1","occurredAt":"2026-11-30T10:00:00.123456Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1002", headers: headersOf("PaymentDeclined.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentDeclined.v1","paymentId":8,"orderId":1002,"customerId":42,` +
			`"amount":"3","currency":"JPY","paymentProvider":"sandbox","externalPaymentId":"decline_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1003", headers: headersOf("PaymentFailed.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentFailed.v1","paymentId":9,"orderId":1003,"customerId":42,` +
			`"amount":"9.99","currency":"EUR","paymentProvider":"sandbox","externalPaymentId":"refuse_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("PaymentAuthorized.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentAuthorized.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("PaymentCaptured.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentCaptured.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","capturedAmount":"30.00","externalCaptureId":"cap_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("CaptureDeclined.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"CaptureDeclined.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","capturedAmount":"30.00","externalCaptureId":"cap_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("CaptureFailed.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"CaptureFailed.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","capturedAmount":"30.00","externalCaptureId":"cap_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("PaymentVoided.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentVoided.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("VoidDeclined.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"VoidDeclined.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("VoidFailed.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"VoidFailed.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1004", headers: headersOf("PaymentExpired.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentExpired.v1","paymentId":10,"orderId":1004,"customerId":42,` +
			`"amount":"50.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_hold_1","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "paymentId", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1001", headers: headersOf("PaymentRefunded.v1"),
		value: `{"eventId":"` + eventID + `","sagaId":"` + sagaID + `","eventType":"PaymentRefunded.v1","refundId":3,"paymentId":7,"orderId":1001,` +
			`"amount":"10.00","currency":"RUB","paymentProvider":"sandbox","externalRefundId":"re_1","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "refundId", "paymentId", "orderId", "amount", "currency", "paymentProvider", "externalRefundId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1001", headers: headersOf("RefundDeclined.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"RefundDeclined.v1","refundId":4,"paymentId":7,"orderId":1001,` +
			`"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalRefundId":"decline_re","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "refundId", "paymentId", "orderId", "amount", "currency", "paymentProvider", "externalRefundId", "occurredAt"},
	},
	{
		channel: "payment.events", key: "1001", headers: headersOf("RefundFailed.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"RefundFailed.v1","refundId":5,"paymentId":7,"orderId":1001,` +
			`"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalRefundId":"refuse_re","occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "refundId", "paymentId", "orderId", "amount", "currency", "paymentProvider", "externalRefundId", "occurredAt"},
	},
	{
		channel: "payment.commands", key: sagaID, headers: headersOf("ChargeOrder.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"ChargeOrder.v1","sagaId":"` + sagaID + `","stepName":"charge","orderId":1001,"customerId":42,` +
			`"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_saga_1","occurredAt":"2026-11-30T10:00:00+03:00"}`,
		required: []string{"eventId", "eventType", "sagaId", "stepName", "orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "occurredAt"},
	},
	{
		channel: "payment.commands", key: sagaID, headers: headersOf("CompensateCharge.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"CompensateCharge.v1","sagaId":"` + sagaID + `","stepName":"undo charge","compensates":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z"}`,
		required: []string{"eventId", "eventType", "sagaId", "stepName", "compensates", "occurredAt"},
	},
	{
		channel: "payment.commands.DLT", key: sagaID,
		headers: map[string]string{"eventId": "x", "x-dlt-error-code": "invalid-amount", "x-dlt-error-message": "amount must be a decimal string",
			"x-dlt-original-topic": "payment.commands", "x-dlt-original-partition": "2", "x-dlt-original-offset": "0", "x-dlt-consumer-group": "payment-commands"},
		value: `{"eventType":"ChargeOrder.v1","amount":100.5}`,
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepCharged.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepCharged.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00.5Z","paymentId":7,"orderId":1001,"amount":"100.50","currency":"RUB"}`,
		required: append(slices.Clone(common), "paymentId", "orderId", "amount", "currency"),
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepAuthorized.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepAuthorized.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","paymentId":7,"orderId":1001,"amount":"100.50","currency":"RUB"}`,
		required: append(slices.Clone(common), "paymentId", "orderId", "amount", "currency"),
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepDeclined.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepDeclined.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","paymentId":8,"orderId":1002,"amount":"3","currency":"JPY"}`,
		required: append(slices.Clone(common), "paymentId", "orderId", "amount", "currency"),
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepFailed.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepFailed.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","code":"order-mismatch","detail":"amount or currency differs","paymentId":9,"orderId":1003}`,
		required: append(slices.Clone(common), "code", "detail"),
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepCompensated.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepCompensated.v1","sagaId":"` + sagaID + `","stepName":"undo charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","compensates":"charge","amount":"100.50","currency":"RUB","paymentId":7,"refundId":3}`,
		required: append(slices.Clone(common), "compensates", "amount"),
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepCancelled.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepCancelled.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","compensatedBy":"undo charge"}`,
		required: common,
	},
	{
		channel: "payment.replies", key: sagaID, headers: headersOf("PaymentStepRejected.v1"),
		value: `{"eventId":"` + eventID + `","eventType":"PaymentStepRejected.v1","sagaId":"` + sagaID + `","stepName":"charge",` +
			`"occurredAt":"2026-11-30T10:00:00Z","code":"step-reused","detail":"the step's amount differs"}`,
		required: append(slices.Clone(common), "code", "detail"),
	},
}

// Every message of the document has a sample, and every sample passes.
func TestValidRecordsPass(t *testing.T) {
	t.Parallel()
	c, err := load()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[*message]bool{}
	for _, s := range samples {
		if err := Check(s.channel, []byte(s.key), s.headers, []byte(s.value)); err != nil {
			t.Errorf("%s: %v", s.name(), err)
		}
		if m, _, err := c.channels[s.channel].pick(s.headers, []byte(s.value)); err == nil {
			covered[m] = true
		}
	}
	for _, ch := range c.ordered {
		for _, m := range ch.messages {
			if !covered[m] {
				t.Errorf("message %s of channel %s has no valid sample here", m.id, ch.id)
			}
		}
	}
	// Validate itself passes them too.
	for _, s := range samples {
		Validate(t, s.channel, []byte(s.key), s.headers, []byte(s.value))
	}
}

// Optional members may be absent; nulls where the order consumer takes
// them; a number amount where the order events allow one.
func TestValidVariantsPass(t *testing.T) {
	t.Parallel()
	order := func(fields string) string {
		return `{"eventId":"` + eventID + `","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,"occurredAt":"2026-11-30T10:00:00Z"` + fields + `}`
	}
	for name, v := range map[string]struct {
		channel, key string
		headers      map[string]string
		value        string
	}{
		"dead letter: original headers that disagree with the value": {"order.events.DLT", "k", map[string]string{"eventId": sagaID, "eventType": "X",
			"x-dlt-error-code": "invalid-event-id", "x-dlt-error-message": "m", "x-dlt-original-topic": "order.events", "x-dlt-original-partition": "0",
			"x-dlt-original-offset": "1", "x-dlt-consumer-group": "g"}, `{"eventId":"` + eventID + `","eventType":"OrderCreated.v1"}`},
		"order: number amount":              {"order.events", "1001", nil, order(`,"amount":100.50`)},
		"order: BigDecimal exponent":        {"order.events", "1001", nil, order(`,"amount":1E+3`)},
		"order: largest amount":             {"order.events", "1001", nil, order(`,"amount":999999999999999.9999`)},
		"order: trailing zeros":             {"order.events", "1001", nil, order(`,"amount":"1.50000"`)},
		"order: null saga and currency":     {"order.events", "1001", nil, order(`,"amount":1,"sagaId":null,"currency":null`)},
		"order: unknown member":             {"order.events", "1001", nil, order(`,"amount":1,"channel":"web"`)},
		"order: headers mirror the value":   {"order.events", "1001", headersOf("OrderCreated.v1"), order(`,"amount":1`)},
		"compensated: nothing was charged":  {"payment.replies", sagaID, headersOf("PaymentStepCompensated.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepCompensated.v1","sagaId":"` + sagaID + `","stepName":"undo","occurredAt":"2026-11-30T10:00:00Z","compensates":"charge","amount":"0.00"}`},
		"compensated: the hold voided":      {"payment.replies", sagaID, headersOf("PaymentStepCompensated.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepCompensated.v1","sagaId":"` + sagaID + `","stepName":"undo","occurredAt":"2026-11-30T10:00:00Z","compensates":"charge","amount":"0","paymentId":7,"voided":true}`},
		"failed: a compensation's void":     {"payment.replies", sagaID, headersOf("PaymentStepFailed.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepFailed.v1","sagaId":"` + sagaID + `","stepName":"undo","occurredAt":"2026-11-30T10:00:00Z","code":"void-declined","detail":"declined","paymentId":7,"compensates":"charge"}`},
		"charge order: manual capture":      {"payment.commands", sagaID, headersOf("ChargeOrder.v1"), `{"eventId":"` + eventID + `","eventType":"ChargeOrder.v1","sagaId":"` + sagaID + `","stepName":"charge","orderId":1001,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi","captureMethod":"manual","occurredAt":"2026-11-30T10:00:00Z"}`},
		"charge order: automatic capture":   {"payment.commands", sagaID, headersOf("ChargeOrder.v1"), `{"eventId":"` + eventID + `","eventType":"ChargeOrder.v1","sagaId":"` + sagaID + `","stepName":"charge","orderId":1001,"customerId":42,"amount":"1","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi","captureMethod":"automatic","occurredAt":"2026-11-30T10:00:00Z"}`},
		"cancelled: no compensatedBy":       {"payment.replies", sagaID, headersOf("PaymentStepCancelled.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepCancelled.v1","sagaId":"` + sagaID + `","stepName":"charge","occurredAt":"2026-11-30T10:00:00Z"}`},
		"failed: no payment":                {"payment.replies", sagaID, headersOf("PaymentStepFailed.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepFailed.v1","sagaId":"` + sagaID + `","stepName":"charge","occurredAt":"2026-11-30T10:00:00Z","code":"order-not-found","detail":"no order 9"}`},
		"by channel id":                     {"paymentReplies", sagaID, headersOf("PaymentStepCancelled.v1"), `{"eventId":"` + eventID + `","eventType":"PaymentStepCancelled.v1","sagaId":"` + sagaID + `","stepName":"charge","occurredAt":"2026-11-30T10:00:00Z"}`},
		"traced payment event (tracestate)": {"payment.events", "1001", map[string]string{"eventId": eventID, "eventType": "PaymentDeclined.v1", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=1"}, `{"eventId":"` + eventID + `","eventType":"PaymentDeclined.v1","paymentId":8,"orderId":1001,"customerId":42,"amount":"3","currency":"JPY","paymentProvider":"sandbox","externalPaymentId":"d","occurredAt":"2026-11-30T10:00:00Z"}`},
	} {
		if err := Check(v.channel, []byte(v.key), v.headers, []byte(v.value)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// mutation is an invalid record made from a valid sample.
type mutation struct {
	name    string
	channel string
	key     []byte
	headers map[string]string
	value   []byte
	// want are words the error must contain, besides the channel.
	want []string
}

// mutate returns s's value with f applied to its members.
func mutate(t *testing.T, s sample, f func(map[string]any)) []byte {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s.value), &v); err != nil {
		t.Fatal(err)
	}
	f(v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func find(t *testing.T, name string) sample {
	t.Helper()
	for _, s := range samples {
		if s.name() == name {
			return s
		}
	}
	t.Fatalf("no sample %s", name)
	return sample{}
}

// Each sample broken one way at a time fails, with a message that names
// the channel and the message: the validator can fail, and the document
// says what the brief of each message says.
func TestInvalidRecordsFail(t *testing.T) {
	t.Parallel()
	var cases []mutation
	for _, s := range samples {
		if s.required == nil {
			continue // a dead letter's value is whatever it was
		}
		var members map[string]any
		if err := json.Unmarshal([]byte(s.value), &members); err != nil {
			t.Fatal(err)
		}
		for _, field := range s.required {
			cases = append(cases, mutation{name: s.name() + " without " + field, channel: s.channel, key: []byte(s.key), headers: s.headers,
				value: mutate(t, s, func(v map[string]any) { delete(v, field) })})
		}
		for _, field := range slices.Sorted(maps.Keys(members)) {
			cases = append(cases, mutation{name: s.name() + ": " + field + " a boolean", channel: s.channel, key: []byte(s.key), headers: s.headers,
				value: mutate(t, s, func(v map[string]any) { v[field] = true })})
		}
		if !s.open {
			cases = append(cases, mutation{name: s.name() + " with an unknown member", channel: s.channel, key: []byte(s.key), headers: s.headers,
				value: mutate(t, s, func(v map[string]any) { v["tip"] = "1" }), want: []string{"tip"}})
		}
		for _, field := range []string{"eventId", "sagaId"} {
			if _, ok := members[field]; ok {
				for _, bad := range []string{"not-a-uuid", "{" + eventID + "}", "urn:uuid:" + eventID, strings.ReplaceAll(eventID, "-", "")} {
					cases = append(cases, mutation{name: s.name() + ": " + field + " " + bad, channel: s.channel, key: []byte(s.key), headers: s.headers,
						value: mutate(t, s, func(v map[string]any) { v[field] = bad })})
				}
			}
		}
		if _, ok := members["eventId"]; ok {
			cases = append(cases, mutation{name: s.name() + ": the nil eventId", channel: s.channel, key: []byte(s.key), headers: s.headers,
				value: mutate(t, s, func(v map[string]any) { v["eventId"] = "00000000-0000-0000-0000-000000000000" })})
		}
		if _, ok := members["eventType"]; ok {
			cases = append(cases, mutation{name: s.name() + ": an unknown eventType", channel: s.channel, key: []byte(s.key),
				value: mutate(t, s, func(v map[string]any) { v["eventType"] = "OrderCancelled.v1" }), want: []string{"eventType"}})
		}
		if _, ok := members["stepName"]; ok {
			for _, bad := range []string{"", strings.Repeat("s", 101), "schritt-ü", "tab\there"} {
				cases = append(cases, mutation{name: s.name() + ": stepName " + fmt.Sprintf("%q", bad), channel: s.channel, key: []byte(s.key), headers: s.headers,
					value: mutate(t, s, func(v map[string]any) { v["stepName"] = bad })})
			}
		}
		if _, ok := members["occurredAt"]; ok {
			for _, bad := range []string{"2026-11-30", "2026-11-30 10:00:00Z", "2026-02-30T10:00:00Z", "2026-11-30T10:00:60Z", "30/11/2026"} {
				cases = append(cases, mutation{name: s.name() + ": occurredAt " + bad, channel: s.channel, key: []byte(s.key), headers: s.headers,
					value: mutate(t, s, func(v map[string]any) { v["occurredAt"] = bad })})
			}
		}
		if s.headers["eventId"] != "" {
			cases = append(cases,
				mutation{name: s.name() + " without the eventId header", channel: s.channel, key: []byte(s.key),
					headers: map[string]string{"eventType": s.headers["eventType"]}, value: []byte(s.value), want: []string{"eventId"}},
				mutation{name: s.name() + " with another eventId in the header", channel: s.channel, key: []byte(s.key),
					headers: map[string]string{"eventId": sagaID, "eventType": s.headers["eventType"]}, value: []byte(s.value), want: []string{"eventId"}},
				mutation{name: s.name() + " with another eventType in the header", channel: s.channel, key: []byte(s.key),
					headers: map[string]string{"eventId": eventID, "eventType": "Other.v1"}, value: []byte(s.value), want: []string{"eventType"}},
			)
		}
		if s.channel != "order.events" {
			cases = append(cases,
				mutation{name: s.name() + " without a key", channel: s.channel, headers: s.headers, value: []byte(s.value), want: []string{"key"}},
				mutation{name: s.name() + " with another key", channel: s.channel, key: []byte("1009"), headers: s.headers, value: []byte(s.value), want: []string{"key"}},
			)
		}
		cases = append(cases, mutation{name: s.name() + " with a member twice", channel: s.channel, key: []byte(s.key), headers: s.headers,
			value: []byte(strings.Replace(s.value, `"eventType"`, `"eventId":"`+eventID+`","eventType"`, 1)), want: []string{"eventId", "more than once"}})
	}

	charge, order := find(t, "payment.commands/ChargeOrder.v1"), find(t, "order.events/OrderCreated.v1")
	compensated := find(t, "payment.replies/PaymentStepCompensated.v1")
	amount := func(s sample, a any) []byte { return mutate(t, s, func(v map[string]any) { v["amount"] = a }) }
	raw := func(s sample, a string) []byte {
		return []byte(strings.Replace(s.value, `"amount":"100.50"`, `"amount":`+a, 1))
	}
	for _, bad := range []struct {
		name  string
		s     sample
		value []byte
	}{
		{"a float amount", charge, raw(charge, `100.5`)},
		{"an integer amount", charge, raw(charge, `100`)},
		{"amount zero", charge, amount(charge, "0.00")},
		{"amount with 5 fraction digits", charge, amount(charge, "1.00001")},
		{"amount with 16 integer digits", charge, amount(charge, "1234567890123456")},
		{"amount with an exponent", charge, amount(charge, "1E+3")},
		{"amount negative", charge, amount(charge, "-1")},
		{"currency in lower case", charge, mutate(t, charge, func(v map[string]any) { v["currency"] = "rub" })},
		{"order id zero", charge, mutate(t, charge, func(v map[string]any) { v["orderId"] = 0 })},
		{"order id a string", charge, mutate(t, charge, func(v map[string]any) { v["orderId"] = "1001" })},
		{"order id 1.0", charge, []byte(strings.Replace(charge.value, `"orderId":1001`, `"orderId":1.0`, 1))},
		{"order id beyond int64", charge, []byte(strings.Replace(charge.value, `"orderId":1001`, `"orderId":9223372036854775808`, 1))},
		{"externalPaymentId too long", charge, mutate(t, charge, func(v map[string]any) { v["externalPaymentId"] = strings.Repeat("x", 129) })},
		{"externalPaymentId empty", charge, mutate(t, charge, func(v map[string]any) { v["externalPaymentId"] = "" })},
		{"captureMethod unknown", charge, mutate(t, charge, func(v map[string]any) { v["captureMethod"] = "later" })},
		{"captureMethod in upper case", charge, mutate(t, charge, func(v map[string]any) { v["captureMethod"] = "MANUAL" })},
		{"compensated: voided false", compensated, mutate(t, compensated, func(v map[string]any) { v["voided"] = false })},
		{"order: amount zero", order, raw(order, `0`)},
		{"order: amount negative", order, raw(order, `-5`)},
		{"order: amount with 5 fraction digits", order, raw(order, `1.23456`)},
		{"order: amount too large", order, raw(order, `1E+15`)},
		{"order: amount with a negative exponent", order, raw(order, `10000e-4`)},
		{"order: amount with a 3-digit exponent", order, raw(order, `1E+001`)},
		{"order: amount number too long", order, raw(order, `1.`+strings.Repeat("0", 38))},
		{"order: amount string with an exponent", order, raw(order, `"1E+3"`)},
		{"order: amount string with spaces", order, raw(order, `" 1"`)},
		{"order: amount string too long", order, raw(order, `"1.`+strings.Repeat("0", 38)+`"`)},
		{"order: amount an object", order, raw(order, `{"v":1}`)},
		{"order: currency of two letters", order, mutate(t, order, func(v map[string]any) { v["currency"] = "XX" })},
		{"order: occurredAt in 1970", order, mutate(t, order, func(v map[string]any) { v["occurredAt"] = "1970-01-01T00:00:00Z" })},
		{"order: occurredAt in 2000, offset back into 1999", order, mutate(t, order, func(v map[string]any) { v["occurredAt"] = "2000-01-01T00:30:00+01:00" })},
		{"order: orderId null", order, mutate(t, order, func(v map[string]any) { v["orderId"] = nil })},
	} {
		cases = append(cases, mutation{name: bad.name, channel: bad.s.channel, key: []byte(bad.s.key), headers: bad.s.headers, value: bad.value})
	}
	cases = append(cases,
		mutation{name: "not JSON", channel: "payment.commands", key: []byte(sagaID), headers: headersOf("ChargeOrder.v1"), value: []byte(`{"eventId":`), want: []string{"JSON"}},
		mutation{name: "two JSON values", channel: "payment.commands", key: []byte(sagaID), headers: headersOf("ChargeOrder.v1"), value: []byte(charge.value + ` {}`), want: []string{"JSON"}},
		mutation{name: "an order event keyed by a word", channel: "order.events", key: []byte("k"), value: []byte(order.value), want: []string{"key"}},
		mutation{name: "a dead letter without its error code", channel: "order.events.DLT", key: []byte("k"),
			headers: map[string]string{"x-dlt-error-message": "m", "x-dlt-original-topic": "order.events", "x-dlt-original-partition": "0", "x-dlt-original-offset": "1", "x-dlt-consumer-group": "g"},
			value:   []byte(`x`), want: []string{"x-dlt-error-code"}},
		mutation{name: "a dead letter with a reason the service does not send", channel: "payment.commands.DLT", key: []byte("k"),
			headers: map[string]string{"x-dlt-error-code": "invalid-event-id", "x-dlt-error-message": "m", "x-dlt-original-topic": "payment.commands", "x-dlt-original-partition": "0", "x-dlt-original-offset": "1", "x-dlt-consumer-group": "g"},
			value:   []byte(`x`), want: []string{"x-dlt-error-code"}},
		mutation{name: "a dead letter with a partition not in decimal", channel: "order.events.DLT", key: []byte("k"),
			headers: map[string]string{"x-dlt-error-code": "invalid-json", "x-dlt-error-message": "m", "x-dlt-original-topic": "order.events", "x-dlt-original-partition": "one", "x-dlt-original-offset": "1", "x-dlt-consumer-group": "g"},
			value:   []byte(`x`), want: []string{"x-dlt-original-partition"}},
		mutation{name: "a message of another channel", channel: "payment.replies", key: []byte(sagaID), headers: headersOf("ChargeOrder.v1"), value: []byte(charge.value), want: []string{"ChargeOrder.v1"}},
		mutation{name: "no eventType anywhere", channel: "payment.replies", key: []byte(sagaID), value: []byte(`{"eventId":"` + eventID + `"}`), want: []string{"eventType"}},
		mutation{name: "an unknown channel", channel: "payment.nothing", value: []byte(`{}`), want: []string{"payment.nothing"}},
	)

	for _, tc := range cases {
		err := Check(tc.channel, tc.key, tc.headers, tc.value)
		if err == nil {
			t.Errorf("%s: valid, want a violation\n  %s", tc.name, tc.value)
			continue
		}
		msg := err.Error()
		for _, w := range append([]string{tc.channel}, tc.want...) {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, msg)
			}
		}
	}
	if len(cases) < 300 {
		t.Errorf("only %d invalid records tried", len(cases))
	}
}

// The message names the channel, the message and the place of the
// violation in the value.
func TestTheErrorNamesChannelMessageAndPlace(t *testing.T) {
	t.Parallel()
	s := find(t, "payment.commands/ChargeOrder.v1")
	err := Check(s.channel, []byte(s.key), s.headers, []byte(strings.Replace(s.value, `"amount":"100.50"`, `"amount":100.5`, 1)))
	if err == nil {
		t.Fatal("a float amount on payment.commands passed")
	}
	for _, w := range []string{"paymentCommands", "payment.commands", "ChargeOrder.v1", "/amount"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Validate and ValidateAll fail the test they are given, once per invalid
// record, and not for a valid one.
func TestValidateFailsTheTest(t *testing.T) {
	t.Parallel()
	good := find(t, "payment.replies/PaymentStepCharged.v1")
	bad := good
	bad.value = strings.Replace(good.value, `"paymentId":7,`, ``, 1)
	r := &recorder{TB: t}
	ValidateAll(r, good.channel,
		Message{Key: []byte(good.key), Headers: good.headers, Value: []byte(good.value)},
		Message{Key: []byte(bad.key), Headers: bad.headers, Value: []byte(bad.value)},
		Message{Key: []byte(good.key), Headers: good.headers, Value: []byte(good.value)},
	)
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], "paymentId") || !strings.Contains(r.errors[0], "PaymentStepCharged.v1") {
		t.Fatalf("failures %q, want one about the missing paymentId", r.errors)
	}
}

func TestChannelOf(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]string{
		"PaymentSucceeded.v1": "paymentEvents", "RefundFailed.v1": "paymentEvents", "ChargeOrder.v1": "paymentCommands",
		"PaymentStepRejected.v1": "paymentReplies", "OrderCreated.v1": "orderEvents",
	} {
		if got, err := ChannelOf(typ); err != nil || got != want {
			t.Errorf("ChannelOf(%s) = %q, %v; want %s", typ, got, err, want)
		}
	}
	if _, err := ChannelOf("OrderCancelled.v1"); err == nil {
		t.Error("ChannelOf an unknown type: no error")
	}
}
