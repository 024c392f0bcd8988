package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// The outcome model: what a command does with its provider call's answer.
// A lost answer is never guessed. Settle is the whole model, a pure
// function that docs/design.md ("When the provider's answer is lost")
// states as a table and TestSettleFollowsTheOutcomeTable checks row by row.
// Below it, what each provider can do and tell (ProviderAbilities), which
// bounds what the model may conclude.

// ProviderDecision is a provider's decision on a call.
type ProviderDecision string

const (
	// ProviderApproved: the provider charged (or refunded).
	ProviderApproved ProviderDecision = "APPROVED"
	// ProviderDeclined: the provider decided, and declined: a final answer,
	// recorded like an approval.
	ProviderDeclined ProviderDecision = "DECLINED"
	// ProviderFailed: the provider decided that a modification it had
	// received (AnswersReceived) failed: nothing moved, a final answer,
	// recorded FAILED.
	ProviderFailed ProviderDecision = "FAILED"
	// ProviderReceived: the provider received a capture, refund or void
	// and decides it later (AnswersReceived): not a decision; its event,
	// or its lookup once it has decided, says what it decided.
	ProviderReceived ProviderDecision = "RECEIVED"
)

// Errors a provider adapter wraps. A call's answer is a decision (nil
// error) or one of these; an error that wraps none of them is unknown, so
// an adapter that fails to classify an error errs on the safe side.
//
// Both refusals speak for the request that got them only. A provider looks
// at a request before its idempotency key (validation, rate limits, rules
// that change), so a retry can be refused although an earlier request
// under the same key charged: the lookup by key, not the refusal, says
// what the key holds. Asking again with the same idempotency key is always
// safe: the provider returns its first answer and moves nothing new.
// Adapters never retry on their own; the core owns retries.
var (
	// ErrProviderNotCharged: the provider certainly did not act on this
	// request, for now: it said so before acting (a 5xx or 429 saying so,
	// our credentials refused), or the request never left this process.
	ErrProviderNotCharged = errors.New("payment provider did not charge")
	// ErrProviderRefused: the provider refused this request for good,
	// before acting, for a reason that asking again does not change (the
	// request is invalid to it); it wraps ErrProviderNotCharged.
	ErrProviderRefused = fmt.Errorf("%w: refused for good", ErrProviderNotCharged)
	// ErrProviderOutcomeUnknown: the provider may or may not have acted
	// (a timeout, a reset after the request was sent, a 5xx, "in
	// progress", an answer that cannot be read).
	ErrProviderOutcomeUnknown = errors.New("payment provider outcome unknown")
	// ErrNoProviderCharge: a lookup found nothing under the key, and
	// nothing being made.
	ErrNoProviderCharge = errors.New("payment provider holds no charge for the key")
)

// ProviderAnswer is a provider's answer, sorted into what the outcome
// model tells apart.
type ProviderAnswer int

const (
	// AnswerNotAsked: the lookup was not made.
	AnswerNotAsked ProviderAnswer = iota
	// AnswerApproved: the provider approved.
	AnswerApproved
	// AnswerDeclined: the provider declined.
	AnswerDeclined
	// AnswerRefusedForGood: the provider refused this request for good.
	AnswerRefusedForGood
	// AnswerNotNow: the provider did not act on this request, for now.
	AnswerNotNow
	// AnswerHoldsNothing: the lookup says nothing was made under the key, and
	// nothing is being made.
	AnswerHoldsNothing
	// AnswerUnknown: the provider may or may not have acted.
	AnswerUnknown
	// AnswerReceived: the provider received the modification and decides
	// it later; only its event, or a later lookup, says what it decided.
	AnswerReceived
	// AnswerFailed: the provider decided that a modification it had
	// received failed.
	AnswerFailed
)

var providerAnswerNames = [...]string{"not asked", "approved", "declined", "refused for good", "not now", "holds nothing", "unknown",
	"received", "failed"}

// String names the answer as the outcome table does.
func (a ProviderAnswer) String() string {
	if int(a) < len(providerAnswerNames) {
		return providerAnswerNames[a]
	}
	return fmt.Sprintf("ProviderAnswer(%d)", int(a))
}

// AnswerOf sorts a call's or a lookup's result.
func AnswerOf(d ProviderDecision, err error) ProviderAnswer {
	switch {
	case err == nil && d == ProviderApproved:
		return AnswerApproved
	case err == nil && d == ProviderDeclined:
		return AnswerDeclined
	case err == nil && d == ProviderFailed:
		return AnswerFailed
	case err == nil && d == ProviderReceived:
		return AnswerReceived
	case errors.Is(err, ErrProviderRefused):
		return AnswerRefusedForGood
	case errors.Is(err, ErrProviderNotCharged):
		return AnswerNotNow
	case errors.Is(err, ErrNoProviderCharge):
		return AnswerHoldsNothing
	default:
		return AnswerUnknown
	}
}

// answerOfCall is the outcome model's view of a call's answer: a receipt
// from a provider that declares it answers at once is not one of its
// answers, so it is unknown, as an answer the adapter did not sort.
func answerOfCall(d ProviderDecision, err error, abilities ProviderAbilities) ProviderAnswer {
	a := AnswerOf(d, err)
	if a == AnswerReceived && abilities.Modifications != AnswersReceived {
		return AnswerUnknown
	}
	return a
}

// Settlement is how a provider call ended, for phase 3 to record.
type Settlement string

const (
	// SettledApproved: the provider carried the command out.
	SettledApproved Settlement = "APPROVED"
	// SettledDeclined: the provider decided, and declined.
	SettledDeclined Settlement = "DECLINED"
	// SettledFailed: the provider refused for good and holds nothing under
	// the provider key, or decided that a modification it received
	// failed: nothing happened, and asking again changes nothing.
	SettledFailed Settlement = "FAILED"
)

// Status is the final status a settlement records on the command's
// reservation: a payment and a refund end in the same statuses.
func (s Settlement) Status() domain.PaymentStatus {
	switch s {
	case SettledDeclined:
		return domain.PaymentDeclined
	case SettledFailed:
		return domain.PaymentFailed
	default:
		return domain.PaymentSucceeded
	}
}

// settlementOf is the settlement a decision records.
func settlementOf(a ProviderAnswer) Settlement {
	switch a {
	case AnswerDeclined:
		return SettledDeclined
	case AnswerFailed:
		return SettledFailed
	default:
		return SettledApproved
	}
}

// Action is what the core does next with a call's answer.
type Action int

const (
	// RecordSettlement: phase 3 records the verdict's settlement.
	RecordSettlement Action = iota + 1
	// ReleaseKey gives the key and the reservation back: the provider did
	// not act, and no earlier request used the reservation's provider key,
	// so nothing can have happened. The client may retry with the same key.
	ReleaseKey
	// LookUpKey asks the provider what it holds under the key: the call was
	// refused, and an earlier attempt may have reached the provider.
	LookUpKey
	// WaitForEarlier waits until no earlier attempt's request can still
	// reach the provider, then looks up again: the provider holds nothing
	// now, but a request sent before this attempt's claim may still land.
	WaitForEarlier
	// KeepUnknown keeps everything (the claim, the PENDING reservation)
	// and ends the lock early: the outcome is unknown, and the retry or
	// the completer asks the provider again with the same key.
	KeepUnknown
	// RecordReceived records that the provider received the command: the
	// key's answer says so (a 202 with the PENDING reservation), and the
	// reservation stays PENDING, its amount held, until the provider's
	// event (or a later lookup) settles it. Nothing is guessed.
	RecordReceived
)

var actionNames = [...]string{"", "record", "release", "look up", "wait", "keep unknown", "record received"}

// String names the action as the outcome table does.
func (a Action) String() string {
	if a > 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Verdict is the outcome model's answer.
type Verdict struct {
	// Action is what to do.
	Action Action
	// Settlement is what RecordSettlement records.
	Settlement Settlement
}

// CallAnswers is what is known about a provider call when the outcome
// model is asked.
type CallAnswers struct {
	// Call is the call's answer.
	Call ProviderAnswer
	// Resumed: the reservation was taken over from an earlier attempt,
	// which may have sent it to the provider. A fresh reservation was made
	// by this attempt, so no earlier request used its provider key.
	Resumed bool
	// Lookup is the lookup's answer, AnswerNotAsked until it is made.
	Lookup ProviderAnswer
	// EarlierMayLand: an earlier attempt's request may still reach the
	// provider (less than the provider's request bound has passed since
	// this attempt's claim).
	EarlierMayLand bool
	// Provider is what the provider lets the model learn
	// (ProviderAbilities.Recovery): whether it can be asked, and whether
	// its "nothing" is a proof. The zero value, NotifiesOnly, concludes
	// the least.
	Provider Recovery
}

// Settle is the outcome model. A decision is recorded (a received
// modification's failure is one); a receipt is recorded as such, the
// reservation left PENDING for the provider's event. A refusal speaks
// for its request only: for a fresh reservation it is the whole truth
// (refused for good: FAILED; not now: give the key back); for a resumed
// one the provider's record settles it, where the provider can be asked,
// and "nothing" after a refusal for good is FAILED only where it is a
// proof: a provider that refuses requests older than a bound, once no
// earlier request can still land. Everything else is unknown, and an
// unknown outcome never deletes anything: it waits for the provider's
// event, a later lookup or the reconciliation.
func Settle(a CallAnswers) Verdict {
	switch a.Call {
	case AnswerApproved, AnswerDeclined, AnswerFailed:
		return Verdict{Action: RecordSettlement, Settlement: settlementOf(a.Call)}
	case AnswerReceived:
		return Verdict{Action: RecordReceived}
	case AnswerRefusedForGood, AnswerNotNow:
		// Below.
	default:
		return Verdict{Action: KeepUnknown}
	}
	switch {
	case !a.Resumed && a.Call == AnswerRefusedForGood:
		return Verdict{Action: RecordSettlement, Settlement: SettledFailed}
	case !a.Resumed:
		return Verdict{Action: ReleaseKey}
	}
	switch a.Lookup {
	case AnswerNotAsked:
		if a.Provider == NotifiesOnly {
			return Verdict{Action: KeepUnknown}
		}
		return Verdict{Action: LookUpKey}
	case AnswerApproved, AnswerDeclined, AnswerFailed:
		return Verdict{Action: RecordSettlement, Settlement: settlementOf(a.Lookup)}
	case AnswerHoldsNothing:
		switch {
		case a.Call != AnswerRefusedForGood, a.Provider != LooksUpWithinBound:
			return Verdict{Action: KeepUnknown}
		case a.EarlierMayLand:
			return Verdict{Action: WaitForEarlier}
		default:
			return Verdict{Action: RecordSettlement, Settlement: SettledFailed}
		}
	default:
		return Verdict{Action: KeepUnknown}
	}
}

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
