package sandboxprovider

import (
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
)

// refundRequest is what a refund's create call asks for: Amount of the
// charge made under the idempotency key Charge, given back.
type refundRequest struct {
	chargeRequest
	Charge string
}

func (r refundRequest) sameAs(o refundRequest) bool {
	return r.Charge == o.Charge && r.chargeRequest.sameAs(o.chargeRequest)
}

// errRefundRefused: the refund cannot be made, whatever the key; nothing
// is recorded under it, as for a refuse_ fault.
var errRefundRefused = errors.New("refund refused")

// decideRefund makes the refund for a key admitted as new. Its charge
// must have succeeded, in the refund's currency, and the charge's
// succeeded refunds with this one must not exceed what it charged: checked
// here, when the refund is decided, under the lock that every decision
// takes, so refunds processed at the same time cannot together go beyond
// the charge. Otherwise it is refused and the key is forgotten. Declined
// for a decline_ reference, like a charge. Called with p.mu held.
func (p *Provider) decideRefund(key string, req refundRequest) (RefundAnswer, error) {
	charge, _, found := p.charges.lookup(req.Charge)
	var refusal string
	switch {
	case found != LookupCharged || charge.Status != StatusSucceeded:
		refusal = "no succeeded charge was made under idempotency key " + req.Charge
	case charge.Currency != req.Currency:
		refusal = fmt.Sprintf("the charge is in %s, not %s", charge.Currency, req.Currency)
	default:
		if left := charge.Amount.Sub(p.refundedLocked(req.Charge)); req.Amount.GreaterThan(left) {
			refusal = fmt.Sprintf("the charge has %s left to refund, less than %s", left, req.Amount)
		}
	}
	if refusal != "" {
		p.refunds.forget(key)
		p.refundCounters.Refusals++
		return RefundAnswer{}, fmt.Errorf("%w: %s; nothing was refunded", errRefundRefused, refusal)
	}
	a := RefundAnswer{
		Decision: p.refunds.decide(key, req, "re_", &p.refundCounters.Refunds, &p.refundCounters.Declines, p.now()),
		Charge:   req.Charge,
	}
	p.refunds.record(key, a)
	p.webhooks.made("refund", a.Decision, a, req.Charge)
	return a, nil
}

// refundedLocked is the total of the succeeded refunds of the charge made
// under chargeKey. Called with p.mu held.
func (p *Provider) refundedLocked(chargeKey string) decimal.Decimal {
	total := decimal.Zero
	for _, e := range p.refunds.byKey {
		if e.answer != nil && e.answer.Charge == chargeKey && e.answer.Status == StatusSucceeded {
			total = total.Add(e.answer.Amount)
		}
	}
	return total
}
