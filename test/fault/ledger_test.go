//go:build fault

package fault

// The provider's books, as the invariants read them: the sandbox's ledger
// or the Stripe fake's, behind one view, so that the same checks hold the
// service to either provider.

import (
	"strings"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/stripefake"
)

// ledger is what a provider holds.
type ledger interface {
	// chargesFor are the one-step charges made for an external payment,
	// under any provider key: more than one is a payment charged twice.
	chargesFor(ext string) []ledgerEntry
	// refundsFor are the refunds of that external payment's charge, under
	// any key.
	refundsFor(ext string) []ledgerEntry
	// refund is the refund made under a provider key.
	refund(key string) (ledgerEntry, bool)
	// counts are the ledger's totals.
	counts() ledgerCounts
}

// ledgerEntry is one charge or refund the provider holds.
type ledgerEntry struct {
	key       string // the provider idempotency key it was made under
	reference string // the external payment (refund) it names
	// status is "succeeded" or "declined" once decided; otherwise the
	// provider's own word for where it stands (Stripe's "processing",
	// "pending" ...).
	status string
	amount decimal.Decimal
}

// The decided statuses of a ledgerEntry: ledgerFailed is a modification
// the sandbox received and then failed (its received mode).
const (
	ledgerSucceeded = "succeeded"
	ledgerDeclined  = "declined"
	ledgerFailed    = "failed"
)

// ledgerCounts are a provider's totals: money moved and declines, of
// one-step charges, refunds and two-step payments.
type ledgerCounts struct {
	charges, declines               int
	refunds, refundDeclines         int
	authorizations, captures, voids int
	// Received, then failed (nothing moved): refunds, and captures and
	// voids; undecided: received and not decided yet (the sandbox's
	// received mode; a refund Stripe holds pending).
	refundFailures, modificationFailures, undecided int
}

// sandboxLedger is the sandbox provider's ledger.
type sandboxLedger struct{ p *sandboxprovider.Server }

func sandboxEntry(d sandboxprovider.Decision) ledgerEntry {
	return ledgerEntry{key: d.IdempotencyKey, reference: d.Reference, status: string(d.Status), amount: d.Amount}
}

func (l sandboxLedger) chargesFor(ext string) []ledgerEntry {
	var out []ledgerEntry
	for _, c := range l.p.ChargesFor(ext) {
		out = append(out, sandboxEntry(c.Decision))
	}
	return out
}

func (l sandboxLedger) refundsFor(ext string) []ledgerEntry {
	var out []ledgerEntry
	for _, r := range l.p.RefundsFor(ext) {
		out = append(out, sandboxEntry(r.Decision))
	}
	return out
}

func (l sandboxLedger) refund(key string) (ledgerEntry, bool) {
	r, ok := l.p.LookupRefund(key)
	return sandboxEntry(r.Decision), ok
}

func (l sandboxLedger) counts() ledgerCounts {
	c, r, cp, vo := l.p.Counters(), l.p.RefundCounters(), l.p.CaptureCounters(), l.p.VoidCounters()
	return ledgerCounts{charges: c.Charges, declines: c.Declines, refunds: r.Refunds, refundDeclines: r.Declines,
		authorizations: l.p.AuthorizationCounters().Authorizations, captures: cp.Captures, voids: vo.Voids,
		refundFailures: r.Failures, modificationFailures: cp.Failures + vo.Failures, undecided: l.p.Undecided()}
}

// stripeLedger is the Stripe fake's: a PaymentIntent is a charge (its
// metadata names our key and the external payment), a Refund a refund
// (its metadata names our key and the external refund), amounts in
// minor units.
type stripeLedger struct{ f *stripefake.Server }

// piStatus is a PaymentIntent's decision as the adapter reads it
// (internal/provider/stripe's decisionOf): succeeded took the money; a
// payment error, 3-D Secure asked for, or a cancel of what held nothing
// declined; anything else is not decided.
func piStatus(p stripefake.PaymentIntent) string {
	held := p.Charged && p.PaymentError == ""
	switch {
	case p.Status == "succeeded":
		return ledgerSucceeded
	case p.Status == "requires_payment_method" && p.PaymentError != "", p.Status == "requires_action", p.Status == "canceled" && !held:
		return ledgerDeclined
	}
	return p.Status
}

// refundStatusOf is a Stripe refund's decision: failed and canceled are
// declines (the money stays with us).
func refundStatusOf(r stripefake.Refund) string {
	switch r.Status {
	case "succeeded":
		return ledgerSucceeded
	case "failed", "canceled":
		return ledgerDeclined
	}
	return r.Status
}

// minor is an amount of Stripe's minor units in its currency as the
// service writes it.
func minor(units int64, currency string) decimal.Decimal {
	c, err := domain.ParseCurrency(strings.ToUpper(currency))
	if err != nil {
		panic(err)
	}
	m, err := domain.MoneyOfMinorUnits(units, c)
	if err != nil {
		panic(err)
	}
	return m.Amount()
}

func (l stripeLedger) chargesFor(ext string) []ledgerEntry {
	var out []ledgerEntry
	for _, p := range l.f.Ledger().PaymentIntents {
		if p.Metadata["external_payment_id"] == ext && p.CaptureMethod != "manual" {
			amount := p.Amount
			if p.Status == "succeeded" {
				amount = p.AmountReceived
			}
			out = append(out, ledgerEntry{key: p.Metadata["provider_key"], reference: ext, status: piStatus(p), amount: minor(amount, p.Currency)})
		}
	}
	return out
}

func stripeRefundEntry(r stripefake.Refund) ledgerEntry {
	return ledgerEntry{key: r.Metadata["provider_key"], reference: r.Metadata["external_refund_id"], status: refundStatusOf(r), amount: minor(r.Amount, r.Currency)}
}

func (l stripeLedger) refundsFor(ext string) []ledgerEntry {
	led := l.f.Ledger()
	of := map[string]bool{}
	for _, p := range led.PaymentIntents {
		if p.Metadata["external_payment_id"] == ext {
			of[p.ID] = true
		}
	}
	var out []ledgerEntry
	for _, r := range led.Refunds {
		if of[r.PaymentIntent] {
			out = append(out, stripeRefundEntry(r))
		}
	}
	return out
}

func (l stripeLedger) refund(key string) (ledgerEntry, bool) {
	for _, r := range l.f.Ledger().Refunds {
		if r.Metadata["provider_key"] == key {
			return stripeRefundEntry(r), true
		}
	}
	return ledgerEntry{}, false
}

func (l stripeLedger) counts() ledgerCounts {
	led := l.f.Ledger()
	var c ledgerCounts
	for _, p := range led.PaymentIntents {
		held := p.Charged && p.PaymentError == ""
		switch {
		case p.CaptureMethod != "manual" && piStatus(p) == ledgerSucceeded:
			c.charges++
		case p.CaptureMethod != "manual" && piStatus(p) == ledgerDeclined:
			c.declines++
		case p.CaptureMethod == "manual" && held:
			c.authorizations++
			if p.Status == "succeeded" {
				c.captures++
			}
			if p.Status == "canceled" && p.CancellationReason != "automatic" {
				c.voids++
			}
		}
	}
	for _, r := range led.Refunds {
		switch refundStatusOf(r) {
		case ledgerSucceeded:
			c.refunds++
		case ledgerDeclined:
			c.refundDeclines++
		default:
			c.undecided++
		}
	}
	return c
}
