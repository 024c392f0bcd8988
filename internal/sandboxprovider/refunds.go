package sandboxprovider

import (
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
)

// refundRequest is what a refund's create call asks for: Amount of the
// charge (or capture) made under the idempotency key Charge, given back.
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

// decideRefund makes the refund for a key admitted as new. What it names
// must be a succeeded charge or a succeeded capture, in the refund's
// currency, and its succeeded refunds with this one must not exceed what
// it charged (captured): checked here, when the refund is decided, under
// the lock that every decision takes, so refunds processed at the same
// time cannot together go beyond it. Otherwise it is refused and the key
// is forgotten. Declined for a decline_ reference, like a charge. Called
// with p.mu held.
func (p *Provider) decideRefund(key string, req refundRequest) (RefundAnswer, error) {
	if refusal := p.refundRefusal(req); refusal != "" {
		p.refunds.forget(key)
		p.refundCounters.Refusals++
		return RefundAnswer{}, fmt.Errorf("%w: %s; nothing was refunded", errRefundRefused, refusal)
	}
	c := &p.refundCounters
	return p.commitRefund(key, req, p.refunds.decide(key, req, "re_", &c.Refunds, &c.Declines, p.now())), nil
}

// refundRefusal says why req cannot be refunded now: what it names is no
// succeeded charge or capture, is in another currency, or has less left
// to refund; "" when it can be. Called with p.mu held.
func (p *Provider) refundRefusal(req refundRequest) string {
	target, refusal := p.refundTargetLocked(req.Charge)
	switch {
	case refusal != "":
		return refusal
	case target.Currency != req.Currency:
		return fmt.Sprintf("the %s is in %s, not %s", target.noun, target.Currency, req.Currency)
	}
	if left := target.Amount.Sub(p.refundedLocked(req.Charge)); req.Amount.GreaterThan(left) {
		return fmt.Sprintf("the %s has %s left to refund, less than %s", target.noun, left, req.Amount)
	}
	return ""
}

// commitRefund records the decision d of the refund under key. Called
// with p.mu held, after refundRefusal found nothing in the way of a
// succeeded one.
func (p *Provider) commitRefund(key string, req refundRequest, d Decision) RefundAnswer {
	a := RefundAnswer{Decision: d, Charge: req.Charge}
	p.refunds.record(key, a)
	group := req.Charge
	if target, refusal := p.refundTargetLocked(req.Charge); refusal == "" {
		group = target.group
	}
	p.webhooks.made("refund", a.Decision, a, group)
	return a
}

// refundTarget is what a refund gives money back of: a charge, or the
// capture of an authorization.
type refundTarget struct {
	noun     string // "charge" or "capture", in refusals
	Amount   decimal.Decimal
	Currency string
	// group is the key whose events may be swapped with the refund's: the
	// charge's, or the captured authorization's.
	group string
}

// refundTargetLocked finds the succeeded charge, or else the succeeded
// capture, made under key, or says why there is none. An authorization's
// key names no money taken: its capture's does. Called with p.mu held.
func (p *Provider) refundTargetLocked(key string) (refundTarget, string) {
	if c, _, found := p.charges.lookup(key); found == LookupCharged && c.Status == StatusSucceeded {
		return refundTarget{noun: "charge", Amount: c.Amount, Currency: c.Currency, group: key}, ""
	}
	if c, _, found := p.captures.lookup(key); found == LookupCharged && c.Status == StatusSucceeded {
		return refundTarget{noun: "capture", Amount: c.Amount, Currency: c.Currency, group: c.Authorization}, ""
	}
	if _, ok := p.authorizations.byKey[key]; ok {
		return refundTarget{}, "idempotency key " + key + " is an authorization's: a refund names its capture's key"
	}
	return refundTarget{}, "no succeeded charge or capture was made under idempotency key " + key
}

// refundedLocked is the total of the succeeded refunds of the charge (or
// capture) made under chargeKey. Called with p.mu held.
func (p *Provider) refundedLocked(chargeKey string) decimal.Decimal {
	total := decimal.Zero
	for _, e := range p.refunds.byKey {
		if e.answer != nil && e.answer.Charge == chargeKey && e.answer.Status == StatusSucceeded {
			total = total.Add(e.answer.Amount)
		}
	}
	return total
}
