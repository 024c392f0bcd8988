package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// A provider reports each decision twice: in the answer to the call, and
// on its own, later, in an event (a webhook) delivered at least once. To
// the service such an event is one more answer from the provider, the same
// as the one the completer gets by looking the object up, and it is
// recorded by the same phase 3 (CommandSteps.Record) as the call's answer:
// one stored response, one outbox event, the key completed (decision 0021).

// ProviderObject is what a provider's event is about.
type ProviderObject string

const (
	// ObjectCharge: the event reports a charge's decision.
	ObjectCharge ProviderObject = "charge"
	// ObjectRefund: the event reports a refund's decision.
	ObjectRefund ProviderObject = "refund"
	// ObjectAuthorization: the event reports an authorization's decision
	// (the charge of a two-step payment).
	ObjectAuthorization ProviderObject = "authorization"
	// ObjectCapture: the event reports a capture's decision.
	ObjectCapture ProviderObject = "capture"
	// ObjectVoid: the event reports a void's decision.
	ObjectVoid ProviderObject = "void"
)

// ProviderEvent is one decision a provider reported on its own, checked
// and parsed by the adapter that received it (its signature verified).
type ProviderEvent struct {
	// ID is the provider's event id: the same on every redelivery.
	ID string
	// Provider is who sent it.
	Provider domain.ProviderName
	// Object is whether it reports a charge or a refund.
	Object ProviderObject
	// Decision is the provider's decision: approved, declined, or for a
	// modification it received, failed.
	Decision ProviderDecision
	// ProviderKey is the idempotency key the service sent with the call
	// (domain.Charge.ProviderIdempotencyKey, domain.Refund's): how the
	// service finds its object.
	ProviderKey string
	// Amount is the amount the provider says it decided on.
	Amount decimal.Decimal
	// Currency is the currency of Amount, as the provider sent it.
	Currency string
	// Type is the event's type as sent (charge.succeeded ...), for the
	// operator who reads a contradiction.
	Type string
	// Raw is the delivery's body, byte for byte, kept with a contradiction.
	Raw []byte
	// Note, for an event with no Decision, says why it is acknowledged and
	// not applied (a type the service does not read, an object it did not
	// make, a lapsed hold the completer asks about).
	Note string
}

// Errors of an adapter that reads a provider's deliveries: the delivery is
// refused, and nothing is stored.
var (
	// ErrEventNotAuthentic: the delivery's signature does not verify (none,
	// malformed, no match, or signed too long ago).
	ErrEventNotAuthentic = errors.New("the provider's event is not authenticated")
	// ErrEventInvalid: the body is not an event the service reads as it is
	// (not JSON, another API version than the one pinned).
	ErrEventInvalid = errors.New("the provider's event cannot be read")
)

// ProviderEventResult says what applying an event did.
type ProviderEventResult string

const (
	// EventApplied: the event resolved a PENDING payment or refund.
	EventApplied ProviderEventResult = "applied"
	// EventDuplicate: this consumer processed the event before; nothing
	// changed.
	EventDuplicate ProviderEventResult = "duplicate"
	// EventAgreed: the object was already final with the event's
	// decision (the call's answer, the completer or another event got
	// there first); nothing changed.
	EventAgreed ProviderEventResult = "agreed"
	// EventContradicts: the event contradicts what the service recorded
	// (another decision, amount or currency); nothing changed, and the
	// event is kept for an operator (provider_event_contradiction).
	EventContradicts ProviderEventResult = "contradiction"
)

// ErrUnknownProviderObject: the event names no payment or refund the
// service holds. Nothing is recorded, so the provider's redelivery is
// applied if the object appears (a charge whose phase 1 had not committed
// when the event came cannot be that, since the provider decides only
// after the call; a key of another system's can). Decision 0021.
var ErrUnknownProviderObject = errors.New("the provider's event names no payment or refund the service holds")

// ErrReportContended: the key of the event's object kept changing hands
// between the read and the record; the provider's redelivery tries again.
var ErrReportContended = errors.New("the event's object kept changing while it was applied")

// ProviderReports reads, inside a transaction, what a provider's event is
// about, and keeps the events that contradict the record.
type ProviderReports interface {
	// Charge reads the payment at provider with the external payment id,
	// its order's saga, and its idempotency record while that is
	// IN_PROGRESS (the claim whose recovery point it is); found is false
	// when there is no such payment.
	Charge(ctx context.Context, provider domain.ProviderName, external domain.ExternalPaymentID) (rep ReportedCharge, found bool, err error)
	// Refund reads the refund at provider with the external refund id,
	// its payment, the order's saga, and its idempotency record while
	// that is IN_PROGRESS; found is false when there is no such refund.
	Refund(ctx context.Context, provider domain.ProviderName, external domain.ExternalRefundID) (rep ReportedRefund, found bool, err error)
	// Transition reads the capture or void sent to the provider under
	// providerKey (the PENDING one if any, else the latest), its payment,
	// the order's saga, and its idempotency record while that is
	// IN_PROGRESS; found is false when there is none.
	Transition(ctx context.Context, providerKey string) (rep ReportedTransition, found bool, err error)
	// KeepContradiction stores an event that contradicts the record, for
	// an operator; once per consumer and event.
	KeepContradiction(ctx context.Context, c Contradiction) error
}

// ReportedTransition is a capture or a void as an event about it finds it.
type ReportedTransition struct {
	// Transition is the capture or void the event names.
	Transition domain.Transition
	// Payment is its payment.
	Payment domain.Payment
	// Saga is the payment's order's saga.
	Saga uuid.NullUUID
	// Claim is as ReportedCharge's.
	Claim *IdempotencyRecord
}

// ReportedCharge is a payment as an event about it finds it.
type ReportedCharge struct {
	// Payment is the payment the event names.
	Payment domain.Payment
	// Saga is the payment's order's saga, for its outcome event.
	Saga uuid.NullUUID
	// Claim is the IN_PROGRESS record whose recovery point the payment
	// is; nil when the key is completed (or purged).
	Claim *IdempotencyRecord
}

// ReportedRefund is a refund as an event about it finds it.
type ReportedRefund struct {
	// Refund is the refund the event names.
	Refund domain.Refund
	// Payment is the refund's payment (its provider key and order).
	Payment domain.Payment
	// Saga is the payment's order's saga, for the refund's event.
	Saga uuid.NullUUID
	// Claim is as ReportedCharge's.
	Claim *IdempotencyRecord
}

// Contradiction is an event kept for an operator.
type Contradiction struct {
	// Consumer is the processed_event consumer that received it.
	Consumer string
	// Event is the event, its raw body included.
	Event ProviderEvent
	// RecordedStatus is the object's status in the service.
	RecordedStatus domain.PaymentStatus
	// Reason says what disagrees.
	Reason string
}

// Report is a command's reservation as a provider's event about it finds
// it: its status and amount, and the claim it is recorded under.
type Report[T any] struct {
	// Reservation is the command's reservation, for its phase 3.
	Reservation T
	// Status is the reservation's status.
	Status domain.PaymentStatus
	// Approved is the status an approval gives the reservation
	// (AUTHORIZED for an authorization); empty means SUCCEEDED.
	Approved domain.PaymentStatus
	// Amount is what the reservation is for.
	Amount domain.Money
	// Claim is the IN_PROGRESS record whose recovery point the
	// reservation is; nil when the key is completed (or purged).
	Claim *IdempotencyRecord
}

// statusOf is the status settled gives the reservation.
func (r Report[T]) statusOf(settled Settlement) domain.PaymentStatus {
	if settled == SettledApproved && r.Approved != "" {
		return r.Approved
	}
	return settled.Status()
}

// ReportedSteps are what a command adds to its steps so that a provider's
// events about it are applied: the reservation the event names, found by
// its provider key in the event's transaction.
type ReportedSteps[T any] interface {
	// Reported finds the event's reservation in r's transaction; found is
	// false when the service holds none.
	Reported(ctx context.Context, r Repos, ev ProviderEvent) (rep Report[T], found bool, err error)
}

// reportAttempts bounds the reads and records of one event whose key
// changes hands in between (ErrLockLost): each change is another request's
// commit, so a second attempt nearly always sees a settled state.
const reportAttempts = 3

// applyReported applies a provider's decision about one of the command's
// reservations, in r's transaction. A PENDING reservation is recorded by
// the command's own phase 3 (CommandSteps.Record), fenced by the token of
// the claim that holds its key (a live request, or an abandoned one):
// whichever of the event and the claim's own phase 3 commits first records
// the decision, and the other's statement matches nothing (ErrLockLost)
// and sees the result. A PENDING reservation whose key is answered (a
// modification the provider received) is settled by its own statement
// (ReceivedSteps.SettleReceived), once. A final reservation is never
// changed: the event agrees with it or contradicts it.
func (uc *IdempotentCommand[C, T]) applyReported(ctx context.Context, r Repos, ev ProviderEvent) (ProviderEventResult, domain.PaymentStatus, string, error) {
	steps, ok := uc.steps.(ReportedSteps[T])
	if !ok {
		return "", "", "", fmt.Errorf("the %s command does not take provider events", uc.name)
	}
	settlement := SettledApproved
	switch ev.Decision {
	case ProviderDeclined:
		settlement = SettledDeclined
	case ProviderFailed:
		settlement = SettledFailed
	}
	for range reportAttempts {
		rep, found, err := steps.Reported(ctx, r, ev)
		switch {
		case err != nil:
			return "", "", "", err
		case !found:
			return "", "", "", ErrUnknownProviderObject
		case !rep.Amount.Amount().Equal(ev.Amount) || string(rep.Amount.Currency()) != ev.Currency:
			return EventContradicts, rep.Status, fmt.Sprintf("the provider decided on %s %s, the service holds %s %s",
				ev.Amount, ev.Currency, rep.Amount.AmountString(), rep.Amount.Currency()), nil
		case rep.Status == rep.statusOf(settlement):
			return EventAgreed, rep.Status, "", nil
		case rep.Status.Final():
			// A later event never undoes a final state.
			return EventContradicts, rep.Status, fmt.Sprintf("the provider reports %s, the service recorded %s", ev.Decision, rep.Status), nil
		case rep.Claim == nil:
			// A PENDING reservation whose key is answered: a modification
			// the provider received, which the event settles by a
			// statement of its own (received_modifications.go). Phase 1
			// writes a reservation with its claim, and phase 3 ends both
			// at once, or records the receipt: only a manual repair
			// leaves one without the other otherwise.
			settled, err := uc.settleReceived(ctx, r, rep.Reservation, settlement)
			switch {
			case errors.Is(err, ErrNotReceived):
				return "", "", "", fmt.Errorf("%s %s is PENDING without a claim in progress", uc.name, ev.ProviderKey)
			case err != nil:
				return "", "", "", err
			case !settled:
				// Settled meanwhile (the event and a lookup at once): read
				// what it left.
				continue
			}
			return EventApplied, rep.statusOf(settlement), "", nil
		}
		k := KeyClaim{Scope: rep.Claim.Scope, CommandHash: rep.Claim.CommandHash, Token: rep.Claim.LockToken,
			answers: uc.answersOf(*rep.Claim, rep.Reservation)}
		_, err = uc.steps.Record(ctx, r, k, rep.Reservation, settlement)
		if errors.Is(err, ErrLockLost) {
			// The claim's own phase 3 (or a takeover) committed between the
			// read and the record: read what it left.
			continue
		}
		if err != nil {
			return "", "", "", err
		}
		return EventApplied, rep.statusOf(settlement), "", nil
	}
	return "", "", "", ErrReportContended
}

// ApplyProviderEvent applies a provider's events (webhooks) exactly once
// (R-DIST-IDEM-2 on another transport): the event's id is recorded in
// processed_event under the consumer's name in the transaction that
// applies it, so a redelivery, however often it comes, changes nothing.
type ApplyProviderEvent struct {
	db          Transactor
	consumer    string
	charges     *IdempotentCommand[ChargeCommand, chargeReservation]
	refunds     *IdempotentCommand[RefundCommand, refundReservation]
	transitions map[ProviderObject]*IdempotentCommand[TransitionCommand, transitionReservation]
	logger      *slog.Logger
}

// NewApplyProviderEvent builds the use case over the commands whose
// objects the events report. consumer names it in processed_event
// ("webhook:sandbox").
//
// transitions are the captures and voids whose events it applies too, if
// the service makes them.
func NewApplyProviderEvent(charges *ChargePayment, refunds *RefundPayment, consumer string, logger *slog.Logger, transitions ...*PaymentTransition) *ApplyProviderEvent {
	uc := &ApplyProviderEvent{db: charges.db, consumer: consumer, charges: charges.run, refunds: refunds.run, logger: logger,
		transitions: map[ProviderObject]*IdempotentCommand[TransitionCommand, transitionReservation]{}}
	for _, t := range transitions {
		uc.transitions[ProviderObject(t.kind)] = t.run
	}
	return uc
}

// providerEventNamespace makes a provider's event id (any string, such as
// evt_...) the uuid processed_event keys by: a name-based (version 5) uuid
// of the provider and the id, the same for every redelivery.
var providerEventNamespace = uuid.MustParse("5f0f6b3e-6a4e-4d0e-9c55-1f3c1c8f2a24")

// eventUUID is ev's key in processed_event.
func eventUUID(ev ProviderEvent) uuid.UUID {
	return uuid.NewSHA1(providerEventNamespace, []byte(string(ev.Provider)+"\x00"+ev.ID))
}

// Handle applies ev once. Errors: ErrUnknownProviderObject (nothing
// recorded: the provider is to deliver it again), ErrReportContended, the
// store's.
func (uc *ApplyProviderEvent) Handle(ctx context.Context, ev ProviderEvent) (ProviderEventResult, error) {
	var (
		result   ProviderEventResult
		recorded domain.PaymentStatus
		reason   string
	)
	id := eventUUID(ev)
	err := uc.db.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		fresh, err := r.ProcessedEvents.MarkProcessed(ctx, uc.consumer, []uuid.UUID{id})
		if err != nil {
			return err
		}
		if !fresh[id] {
			result = EventDuplicate
			return nil
		}
		switch ev.Object {
		case ObjectCharge, ObjectAuthorization:
			result, recorded, reason, err = uc.charges.applyReported(ctx, r, ev)
		case ObjectCapture, ObjectVoid:
			transition, ok := uc.transitions[ev.Object]
			if !ok {
				return fmt.Errorf("an event about a %s, which this service does not make", ev.Object)
			}
			result, recorded, reason, err = transition.applyReported(ctx, r, ev)
		case ObjectRefund:
			result, recorded, reason, err = uc.refunds.applyReported(ctx, r, ev)
		default:
			err = fmt.Errorf("an event about %q", ev.Object)
		}
		if err != nil || result != EventContradicts {
			// An error rolls the processed_event row back with everything:
			// the redelivery is applied afresh.
			return err
		}
		return r.ProviderReports.KeepContradiction(ctx, Contradiction{Consumer: uc.consumer, Event: ev, RecordedStatus: recorded, Reason: reason})
	})
	if err != nil {
		return "", err
	}
	if result == EventContradicts {
		uc.logger.ErrorContext(ctx, "a provider's event contradicts the service's record; nothing changed, the event is kept in provider_event_contradiction",
			"provider", ev.Provider, "event_id", ev.ID, "event_type", ev.Type, "provider_key", ev.ProviderKey,
			"recorded_status", recorded, "reason", reason)
	}
	return result, nil
}
