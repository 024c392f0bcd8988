package app

import (
	"fmt"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// What a provider can do and tell differs from one provider to the next,
// and the outcome model may conclude only what the provider's semantics
// prove. The sandbox answers a lookup by our idempotency key with
// "nothing, and nothing being made", and refuses a request older than a
// bound, so nothing under the key once the bound has passed is a proof.
// Stripe lists its own records (our reference rides in their metadata) but
// acts on a request however late it arrives, so finding nothing proves
// nothing. Adyen cannot be asked at all: its signed notification is the
// only word on a lost answer. Each adapter says which it is
// (ProviderAbilities), and Settle reads the Recovery they give.

// ProviderAbilities say what a provider can do and tell, as its adapter
// declares them (docs/design.md, "What each provider can prove").
type ProviderAbilities struct {
	// Lookup is how the provider's record of a request can be asked for.
	Lookup LookupKind
	// RequestBound, when set, is how long after its sending the provider
	// still acts on a request (the sandbox's Request-Max-Age, with the
	// clock skew between us and it): from this long after a claim on, no
	// earlier attempt's request can land. Zero: no bound, a request may
	// land however late.
	RequestBound time.Duration
	// Modifications is how the provider answers a capture, a refund or a
	// void.
	Modifications ModificationAnswers
	// MaxKeyLength is the longest idempotency key the provider takes; the
	// adapter derives a shorter one, the same on every retry, from a
	// longer one.
	MaxKeyLength int
	// MinorUnits: the provider takes amounts in minor units (cents), by
	// each currency's exponent; an amount that cannot be written so is
	// refused before anything is sent.
	MinorUnits bool
}

// LookupKind is how a provider's record of a request can be asked for.
type LookupKind int

const (
	// NoLookup (the zero value, the safe default): the provider cannot be
	// asked; only its signed notification settles a lost answer (Adyen).
	NoLookup LookupKind = iota
	// LookupByKey: the provider answers what it holds under our
	// idempotency key, and "nothing" means nothing is being made either
	// (the sandbox).
	LookupByKey
	// LookupByListing: the provider lists its own records, which carry our
	// reference, over a window of time, strongly consistent (Stripe's List
	// API, never its eventually consistent Search).
	LookupByListing
)

// ModificationAnswers is how a provider answers a capture, a refund or a
// void.
type ModificationAnswers int

const (
	// AnswersAtOnce: the answer is the outcome (the sandbox, Stripe).
	AnswersAtOnce ModificationAnswers = iota
	// AnswersReceived: the answer is "received"; the outcome comes later,
	// as a signed notification, and may be a failure (Adyen).
	AnswersReceived
)

// Recovery is what the outcome model may learn of a call whose answer was
// lost or refused, by what the provider can do: whether it can be asked,
// and whether its "nothing" is a proof.
type Recovery int

const (
	// NotifiesOnly (the zero value, the safe default): no lookup; a lost
	// answer stays unknown until the provider's event, a retry or the
	// reconciliation says more.
	NotifiesOnly Recovery = iota
	// LooksUp: a lookup finds what the provider made, and that is the
	// truth; finding nothing proves nothing, since a request sent earlier
	// may still land.
	LooksUp
	// LooksUpWithinBound: as LooksUp, and the provider acts on a request
	// only within a bound of its sending, so nothing found once the bound
	// has passed is a proof that nothing was, or will be, made.
	LooksUpWithinBound
)

var recoveryNames = [...]string{"notifies only", "looks up", "looks up, bounded"}

// String names the recovery as the outcome table does.
func (r Recovery) String() string {
	if r >= 0 && int(r) < len(recoveryNames) {
		return recoveryNames[r]
	}
	return fmt.Sprintf("Recovery(%d)", int(r))
}

// Recovery is what the outcome model may learn from the provider.
func (a ProviderAbilities) Recovery() Recovery {
	switch {
	case a.Lookup == NoLookup:
		return NotifiesOnly
	case a.RequestBound > 0:
		return LooksUpWithinBound
	default:
		return LooksUp
	}
}

// Provider is what every provider port shares: the provider says what it
// can do and tell, and the core settles its answers by that.
type Provider interface {
	// Abilities says what the provider can do and tell.
	Abilities() ProviderAbilities
}

// takesAmount reports whether a provider of abilities a can be sent m as
// it is: one that counts in minor units takes only an amount they write
// exactly (domain.Money.InMinorUnits).
func (a ProviderAbilities) takesAmount(m domain.Money) error {
	if !a.MinorUnits {
		return nil
	}
	if _, ok := m.InMinorUnits(); !ok {
		return fmt.Errorf("%w: %s %s", ErrAmountNotInMinorUnits, m.AmountString(), m.Currency())
	}
	return nil
}
