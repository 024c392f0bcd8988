//go:build fault

package fault

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// The two-step invariants can fail: each bad ledger, table or answer below
// breaks one of them, and the checks fed it must say so. A good set of
// facts passes, so that a failure here is the mutation's.

const (
	goodRef        = "pi_checker"
	goodAuthKey    = "sandbox:" + goodRef
	goodCaptureKey = goodAuthKey + ":capture:cap_checker"
	goodVoidKey    = goodAuthKey + ":void"
	goodBody       = `{"id":1,"status":"SUCCEEDED","capturedAmount":"60.00"}`
)

func money(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func decision(id, key string, status sandboxprovider.ChargeStatus, amount, ref string) sandboxprovider.Decision {
	return sandboxprovider.Decision{ID: id, IdempotencyKey: key, Status: status, Amount: money(amount), Currency: "RUB", Reference: ref}
}

func authorizationOf(id, key, amount, ref string) sandboxprovider.Authorization {
	return sandboxprovider.Authorization{AuthorizationState: sandboxprovider.AuthorizationState{
		AuthorizationAnswer: sandboxprovider.AuthorizationAnswer{Decision: decision(id, key, sandboxprovider.StatusSucceeded, amount, ref)}}}
}

func captureOf(id, key string, status sandboxprovider.ChargeStatus, amount string) sandboxprovider.Capture {
	return sandboxprovider.Capture{CaptureAnswer: sandboxprovider.CaptureAnswer{
		Decision: decision(id, key, status, amount, strings.TrimPrefix(key, goodAuthKey+":capture:")), Authorization: goodAuthKey}}
}

func voidOf(key string) sandboxprovider.Void {
	return sandboxprovider.Void{VoidAnswer: sandboxprovider.VoidAnswer{
		Decision: decision("vo_1", key, sandboxprovider.StatusSucceeded, "100", ""), Authorization: goodAuthKey}}
}

func refundAt(id, ext, amount string) sandboxprovider.Refund {
	return sandboxprovider.Refund{RefundAnswer: sandboxprovider.RefundAnswer{
		Decision: decision(id, "refund:sandbox:"+ext, sandboxprovider.StatusSucceeded, amount, ext), Charge: goodCaptureKey}}
}

// goodFacts is a payment of 100.00 authorized, captured 60.00 under one
// key (its answer seen and replayed), refunded 20.00, with its events.
func goodFacts() twoStepFacts {
	captured := money("60")
	status, body := http.StatusCreated, goodBody
	a := answer{client: clientID, key: "cap-1", status: http.StatusCreated, body: []byte(goodBody), transition: true}
	replay := a
	replay.replayed = true
	return twoStepFacts{
		ref: goodRef,
		ledger: sandboxprovider.Ledger{
			Authorizations: []sandboxprovider.Authorization{authorizationOf("pa_1", goodAuthKey, "100", goodRef)},
			Captures:       []sandboxprovider.Capture{captureOf("cp_1", goodCaptureKey, sandboxprovider.StatusSucceeded, "60")},
			Refunds:        []sandboxprovider.Refund{refundAt("re_1", "re_one", "20")},
		},
		payment:     twoStepRow{id: 1, status: "SUCCEEDED", amount: money("100"), captured: &captured},
		transitions: []transitionRow{{id: 1, kind: "capture", status: "SUCCEEDED", providerKey: goodCaptureKey}},
		refunds:     []refundRow{{id: 1, payment: 1, ext: "re_one", status: "SUCCEEDED", amount: money("20")}},
		records:     map[scope]recordRow{{clientID, "cap-1"}: {status: "COMPLETED", httpStatus: &status, response: &body}},
		answers:     []answer{a},
		replays:     []answer{replay},
		outbox: []twoStepEvent{
			{eventID: "e1", typ: "PaymentAuthorized.v1", published: true},
			{eventID: "e2", typ: "PaymentCaptured.v1", published: true},
			{eventID: "e3", typ: "PaymentRefunded.v1", published: true},
		},
		topic: map[string]string{"e1": "PaymentAuthorized.v1", "e2": "PaymentCaptured.v1", "e3": "PaymentRefunded.v1"},
	}
}

// expired makes the good facts a payment whose hold lapsed, nothing
// captured: EXPIRED with its event.
func expired(f *twoStepFacts) {
	f.ledger.Captures, f.ledger.Refunds, f.refunds, f.transitions, f.answers, f.replays = nil, nil, nil, nil, nil, nil
	f.ledger.Authorizations[0].Hold = sandboxprovider.HoldExpired
	f.payment.status, f.payment.captured = "EXPIRED", nil
	f.outbox = []twoStepEvent{f.outbox[0], {eventID: "e2", typ: "PaymentExpired.v1", published: true}}
	f.topic = map[string]string{"e1": "PaymentAuthorized.v1", "e2": "PaymentExpired.v1"}
}

func TestTwoStepInvariantsCatchBadLedgers(t *testing.T) {
	if v := goodFacts().check(); len(v) > 0 {
		t.Fatalf("the good facts: %v", v)
	}
	lapsed := goodFacts()
	expired(&lapsed)
	lapsed.expiryDue = true
	if v := lapsed.check(); len(v) > 0 {
		t.Fatalf("the good facts of a lapsed hold: %v", v)
	}
	tests := []struct {
		name   string
		break_ func(f *twoStepFacts)
		want   string
	}{
		{"a second succeeded capture", func(f *twoStepFacts) {
			f.ledger.Captures = append(f.ledger.Captures, captureOf("cp_2", goodAuthKey+":capture:cap_two", sandboxprovider.StatusSucceeded, "10"))
			f.transitions = append(f.transitions, transitionRow{id: 2, kind: "capture", status: "SUCCEEDED", providerKey: goodAuthKey + ":capture:cap_two"})
		}, "2 captures and 0 voids of authorization"},
		{"a capture and a void both succeeded", func(f *twoStepFacts) {
			f.ledger.Voids = append(f.ledger.Voids, voidOf(goodVoidKey))
			f.transitions = append(f.transitions, transitionRow{id: 2, kind: "void", status: "SUCCEEDED", providerKey: goodVoidKey})
		}, "1 captures and 1 voids of authorization"},
		{"a capture above the authorization", func(f *twoStepFacts) {
			f.ledger.Captures[0].Amount = money("120")
			c := money("120")
			f.payment.captured = &c
		}, "captured 120 of an authorization of 100"},
		{"refunds above the capture", func(f *twoStepFacts) {
			f.ledger.Refunds = append(f.ledger.Refunds, refundAt("re_2", "re_two", "50"))
			f.refunds = append(f.refunds, refundRow{id: 2, payment: 1, ext: "re_two", status: "SUCCEEDED", amount: money("50")})
		}, "refunded 70 of capture"},
		{"SUCCEEDED with no capture at the provider", func(f *twoStepFacts) {
			f.ledger.Captures, f.ledger.Refunds, f.refunds, f.transitions = nil, nil, nil, nil
		}, "is SUCCEEDED and the provider holds 0 succeeded captures"},
		{"captured at the provider, AUTHORIZED in the table", func(f *twoStepFacts) { f.payment.status = "AUTHORIZED" }, "a lost capture"},
		{"captured_amount is not what the capture took", func(f *twoStepFacts) {
			c := money("50")
			f.payment.captured = &c
		}, "captured_amount"},
		{"VOIDED with no void at the provider", func(f *twoStepFacts) {
			f.ledger.Captures, f.ledger.Refunds, f.refunds, f.transitions = nil, nil, nil, nil
			f.payment.status, f.payment.captured = "VOIDED", nil
		}, "is VOIDED and the provider holds 0 succeeded voids"},
		{"voided at the provider, AUTHORIZED in the table", func(f *twoStepFacts) {
			f.ledger.Captures, f.ledger.Refunds, f.refunds = nil, nil, nil
			f.ledger.Voids = []sandboxprovider.Void{voidOf(goodVoidKey)}
			f.transitions = []transitionRow{{id: 1, kind: "void", status: "SUCCEEDED", providerKey: goodVoidKey}}
			f.payment.status, f.payment.captured = "AUTHORIZED", nil
		}, "a lost void"},
		{"two authorizations of one payment", func(f *twoStepFacts) {
			f.ledger.Authorizations = append(f.ledger.Authorizations, authorizationOf("pa_2", goodAuthKey+"-again", "100", goodRef))
		}, "2 succeeded authorizations"},
		{"a capture with no transition", func(f *twoStepFacts) { f.transitions = nil }, "has no transition for it"},
		{"a transition left PENDING", func(f *twoStepFacts) { f.transitions[0].status = "PENDING" }, "still PENDING"},
		{"a SUCCEEDED transition the provider declined", func(f *twoStepFacts) {
			f.ledger.Captures = append(f.ledger.Captures, captureOf("cp_2", goodAuthKey+":capture:cap_two", sandboxprovider.StatusDeclined, "10"))
			f.transitions = append(f.transitions, transitionRow{id: 2, kind: "capture", status: "SUCCEEDED", providerKey: goodAuthKey + ":capture:cap_two"})
		}, "is SUCCEEDED and the provider holds true (declined)"},
		{"a FAILED transition the provider made", func(f *twoStepFacts) {
			f.ledger.Captures = append(f.ledger.Captures, captureOf("cp_2", goodAuthKey+":capture:cap_two", sandboxprovider.StatusDeclined, "10"))
			f.transitions = append(f.transitions, transitionRow{id: 2, kind: "capture", status: "FAILED", providerKey: goodAuthKey + ":capture:cap_two"})
		}, "is FAILED and the provider declined it"},
		{"refund rows that do not add up to the provider's", func(f *twoStepFacts) { f.refunds[0].amount = money("30") }, "add up to 30"},
		{"a refund lost by the table", func(f *twoStepFacts) { f.refunds = nil }, "add up to 0"},
		{"an answer that is not the stored outcome", func(f *twoStepFacts) {
			f.answers[0].body = []byte(`{"id":1,"status":"SUCCEEDED","capturedAmount":"60.0"}`)
		}, "differs from the key's stored outcome"},
		{"a 201 to a capture of a payment the table calls AUTHORIZED", func(f *twoStepFacts) {
			f.ledger.Captures, f.ledger.Refunds, f.refunds, f.transitions = nil, nil, nil, nil
			f.payment.status, f.payment.captured = "AUTHORIZED", nil
			f.outbox, f.topic = f.outbox[:1], map[string]string{"e1": "PaymentAuthorized.v1"}
		}, "the payment is AUTHORIZED"},
		{"an identical capture refused while its key's capture was made", func(f *twoStepFacts) {
			f.answers = append(f.answers, answer{client: clientID, key: "cap-1", status: http.StatusConflict, code: "payment-not-authorized", transition: true})
		}, "refused, while its own key's"},
		{"a replay that differs", func(f *twoStepFacts) { f.replays[0].body = []byte(`{"id":1}`) }, "replay"},
		{"a replay without Idempotent-Replayed", func(f *twoStepFacts) { f.replays[0].replayed = false }, "replay (replayed false)"},
		{"an event missing from the topic", func(f *twoStepFacts) { delete(f.topic, "e2") }, "is not on the topic"},
		{"an unpublished event", func(f *twoStepFacts) { f.outbox[1].published = false }, "unpublished"},
		{"no capture event", func(f *twoStepFacts) { f.outbox = f.outbox[:1] }, "0 PaymentCaptured.v1 outbox rows, want 1"},
		{"EXPIRED while the provider still holds the money", func(f *twoStepFacts) {
			expired(f)
			f.ledger.Authorizations[0].Hold = sandboxprovider.HoldActive
		}, "is EXPIRED and the provider's hold is \"active\""},
		{"a lapsed hold left AUTHORIZED once the completer had time", func(f *twoStepFacts) {
			expired(f)
			f.payment.status, f.expiryDue = "AUTHORIZED", true
			f.outbox, f.topic = f.outbox[:1], map[string]string{"e1": "PaymentAuthorized.v1"}
		}, "a lapse not recorded"},
		{"a capture that succeeded after the hold lapsed", func(f *twoStepFacts) {
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			f.ledger.Authorizations[0].ExpiresAt = at
			f.ledger.Captures[0].Created = at.Add(time.Second)
		}, "after the hold lapsed"},
		{"an EXPIRED payment without its event", func(f *twoStepFacts) {
			expired(f)
			f.outbox, f.topic = f.outbox[:1], map[string]string{"e1": "PaymentAuthorized.v1"}
		}, "0 PaymentExpired.v1 outbox rows, want 1"},
		{"two authorization events", func(f *twoStepFacts) {
			f.outbox = append(f.outbox, twoStepEvent{eventID: "e4", typ: "PaymentAuthorized.v1", published: true})
			f.topic["e4"] = "PaymentAuthorized.v1"
		}, "2 PaymentAuthorized.v1 outbox rows, want 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := goodFacts()
			tc.break_(&f)
			v := f.check()
			for _, s := range v {
				if strings.Contains(s, tc.want) {
					return
				}
			}
			t.Fatalf("no violation says %q; the checks said %v", tc.want, v)
		})
	}
}

// The answers of a capture or a void are classified as the contract
// says: a refusal that stores nothing is final and unstored, a decline
// stored, another transition in progress retryable; a charge's answer
// with the same code is not a transition's.
func TestTransitionAnswersClassified(t *testing.T) {
	tests := []struct {
		a                        answer
		final, stored, retryable bool
	}{
		{answer{status: 201, transition: true}, true, true, false},
		{answer{status: 422, code: "capture-declined", transition: true}, true, true, false},
		{answer{status: 422, code: "void-failed", transition: true}, true, true, false},
		{answer{status: 409, code: "payment-not-authorized", transition: true}, true, false, false},
		{answer{status: 409, code: "capture-mismatch", transition: true}, true, false, false},
		{answer{status: 409, code: codeTransitionInProgress, retryAfter: "2", transition: true}, false, false, true},
		{answer{status: 409, code: codeTransitionInProgress, retryAfter: "2"}, false, false, false},
		{answer{status: 422, code: "capture-declined"}, false, false, false},
	}
	for _, tc := range tests {
		if tc.a.final() != tc.final || tc.a.stored() != tc.stored || tc.a.retryable() != tc.retryable {
			t.Errorf("%d %s (transition %v): final %v stored %v retryable %v, want %v %v %v", tc.a.status, tc.a.code, tc.a.transition,
				tc.a.final(), tc.a.stored(), tc.a.retryable(), tc.final, tc.stored, tc.retryable)
		}
	}
}
