//go:build fault

package fault

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// The saga invariants can fail: each bad ledger or reply below breaks one
// of them, and the checks fed it must say so. A good saga passes, so that
// a failure here is the mutation's.

func sagaCharge(status sandboxprovider.ChargeStatus, amount string) sandboxprovider.Charge {
	return sandboxprovider.Charge{ChargeAnswer: sandboxprovider.ChargeAnswer{
		Decision: decision("ch_1", "sandbox:pi_saga", status, amount, "pi_saga")}}
}

func sagaRefund(amount string) sandboxprovider.Refund {
	return sandboxprovider.Refund{RefundAnswer: sandboxprovider.RefundAnswer{
		Decision: decision("re_1", "refund:sandbox:saga", sandboxprovider.StatusSucceeded, amount, "saga"), Charge: "sandbox:pi_saga"}}
}

func TestSagaInvariantsCatchBadLedgers(t *testing.T) {
	type facts struct {
		sg      plannedSaga
		replies map[string]map[string]any
		charges []sandboxprovider.Charge
		refunds []sandboxprovider.Refund
	}
	good := func() facts {
		return facts{
			sg: plannedSaga{id: uuid.New(), copies: 2, compensate: 1, charge: op{ext: "pi_saga", amount: "10.00"}},
			replies: map[string]map[string]any{
				stepCharge:     {"eventType": "PaymentStepCharged.v1", "amount": "10.00"},
				stepCompensate: {"eventType": "PaymentStepCompensated.v1", "amount": "10.00"},
			},
			charges: []sandboxprovider.Charge{sagaCharge(sandboxprovider.StatusSucceeded, "10")},
			refunds: []sandboxprovider.Refund{sagaRefund("10")},
		}
	}
	check := func(f facts) violations { return sagaLedgerChecks(f.sg, f.replies, f.charges, f.refunds) }
	if v := check(good()); len(v) > 0 {
		t.Fatalf("the good saga: %v", v)
	}
	tests := []struct {
		name   string
		break_ func(f *facts)
		want   string
	}{
		{"charged twice", func(f *facts) {
			f.charges = append(f.charges, sagaCharge(sandboxprovider.StatusSucceeded, "10"))
			f.refunds = append(f.refunds, sagaRefund("10"))
			f.replies[stepCompensate]["amount"] = "20"
		}, "2 times"},
		{"compensated and not refunded", func(f *facts) { f.refunds = nil }, "compensated, and the provider holds 10"},
		{"compensated in part", func(f *facts) { f.refunds[0].Amount = money("4") }, "compensated, and the provider holds 6"},
		{"refunded above the charge", func(f *facts) { f.refunds = append(f.refunds, sagaRefund("5")) }, "refunded 15 of 10 charged"},
		{"charged reply with no charge", func(f *facts) { f.charges, f.refunds = nil, nil }, "replied PaymentStepCharged.v1 for 10.00 and the provider charged 0"},
		{"cancelled and charged", func(f *facts) {
			f.replies[stepCharge] = map[string]any{"eventType": "PaymentStepCancelled.v1"}
			f.sg.compensate = 0
		}, "replied PaymentStepCancelled.v1 and the provider charged 10"},
		{"declined and charged", func(f *facts) {
			f.replies[stepCharge] = map[string]any{"eventType": "PaymentStepDeclined.v1"}
		}, "replied PaymentStepDeclined.v1"},
		{"compensated reply for another amount", func(f *facts) { f.replies[stepCompensate]["amount"] = "9.99" }, "compensated 9.99 and the provider refunded 10"},
		{"no reply to the step", func(f *facts) { delete(f.replies, stepCharge) }, "no reply to its charge step"},
		{"no reply to the compensation", func(f *facts) { delete(f.replies, stepCompensate) }, "no reply to its compensation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := good()
			tc.break_(&f)
			for _, s := range check(f) {
				if strings.Contains(s, tc.want) {
					return
				}
			}
			t.Fatalf("no violation says %q; the checks said %v", tc.want, check(f))
		})
	}
	id := stepID{"s", stepCharge}
	if v := sameReplies(id, [][]byte{[]byte(`{"eventId":"a"}`), []byte(`{"eventId":"a"}`)}); len(v) != 0 {
		t.Fatalf("identical replies: %v", v)
	}
	if v := sameReplies(id, [][]byte{[]byte(`{"eventId":"a"}`), []byte(`{"eventId":"b"}`)}); len(v) != 1 {
		t.Fatalf("a re-sent command answered with a new reply: %v, want one violation", v)
	}
}
