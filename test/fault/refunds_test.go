//go:build fault

package fault

// Refunds in the fault suite: the refund operation of a careful client, and
// the payments it refunds.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// refundOp is one refund of a careful client: one idempotency key, one
// external refund, of a payment that succeeded.
type refundOp struct {
	key    string
	amount string
	ext    string // externalRefundId; the sandbox provider's behaviour goes by its prefix
	paid   paid
}

// paid is a payment that succeeded: what a refund of it needs and what the
// checks compare it with.
type paid struct {
	op
	id int64
}

func (r refundOp) call() call {
	b, _ := json.Marshal(map[string]any{"amount": r.amount, "externalRefundId": r.ext})
	return call{key: r.key, client: r.paid.client(), bearer: bearerOf(r.paid.apiKey),
		path: fmt.Sprintf("/payments/%d/refunds", r.paid.id), body: b, refund: true}
}

// providerKey is the key the service refunds the op under at the provider.
func (r refundOp) providerKey() string { return refundKey(r.paid.op, r.ext) }

// refundKey is the provider key of the refund ext of the payment that o
// charged: "refund:", the payment's provider, ":" and the external refund.
func refundKey(o op, ext string) string { return "refund:" + o.provider() + ":" + ext }

// refund sends one POST /payments/{id}/refunds through the replica's front
// proxy, bounded by timeout.
func (r *replica) refund(o refundOp, timeout time.Duration) answer { return r.send(o.call(), timeout) }

// pay settles the charges of ops with no fault armed, and returns their
// payments: what the refunds of a test start from.
func (s *stack) pay(ops []op) []paid {
	s.t.Helper()
	out := make([]paid, len(ops))
	for i, o := range ops {
		s.addOrder(o)
		seen := s.settle(o, 20*time.Second)
		if len(seen) == 0 {
			s.t.Fatalf("charge %s before the refunds: no attempt made", o.key)
		}
		last := seen[len(seen)-1]
		var body struct {
			ID int64 `json:"id"`
		}
		if last.status != http.StatusCreated || json.Unmarshal(last.body, &body) != nil || body.ID == 0 {
			s.t.Fatalf("charge %s before the refunds: %s, want 201 with the payment", o.key, last)
		}
		out[i] = paid{op: o, id: body.ID}
	}
	return out
}

// toRefund returns n charges to refund, named after test, for orders from
// order on: the payments a test's refunds start from, once s.pay made them.
func toRefund(test string, n int, order, customer int64) []op {
	ops := make([]op, n)
	for i := range n {
		ops[i] = op{key: fmt.Sprintf("%s-charge-%d", test, i), order: order + int64(i), customer: customer,
			amount: fmt.Sprintf("%d.50", 40+i), ext: fmt.Sprintf("pi_%s_%d", test, i)}
	}
	return ops
}
