package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// Modifications a provider receives and decides later (Adyen's shape,
// ProviderAbilities.Modifications is AnswersReceived): a capture, refund
// or void is answered "received", and its outcome comes only as the
// provider's signed event, a failure among them. The outcome model records
// the receipt (RecordReceived): the key's answer is the PENDING
// reservation (a 202), stored now and replayed byte for byte, while the
// reservation stays PENDING with its amount held (a capture's or void's
// transition keeps every other one of the payment out; a refund's amount
// counts in refund_reserved) and no event is announced. The provider's
// event settles it by the command's own statement (SettleReceived): the
// final status, the payment moved on an approval, a refund's amount
// given back, the event, once. Nothing is guessed: where the provider can
// be asked, the completer's runs look a received modification up after a
// while (SettleReceivedModifications) and settle what it decided; where
// it cannot, and for as long as it says "received", it stays PENDING and
// is listed for the reconciliation (ListReceived).

// ErrAnswerAwaitsSettlement: the key's answer can only be the outcome (a
// saga step's reply says what the compensation did), so a receipt stores
// nothing; the claim stays, as for an unknown outcome, and the provider's
// event records the outcome through it.
var ErrAnswerAwaitsSettlement = errors.New("the key's answer is the outcome the provider has not decided yet")

// errAwaitsEvent is the cause an unknown outcome carries when the
// provider received the command and its outcome comes with its event.
var errAwaitsEvent = errors.New("the provider received the command; its outcome comes with its event")

// ErrNotReceived: the reservation does not await its provider's decision
// (no receipt was recorded for it): its claim records its outcome.
var ErrNotReceived = errors.New("the reservation awaits no provider's decision")

// ReceivedSteps are what a command adds to its steps when its provider
// may answer "received".
type ReceivedSteps[T any] interface {
	// RecordReceived is phase 3 of a receipt: the key completed with the
	// answer that the provider received the command (the PENDING
	// reservation), fenced by k.Token, the reservation left PENDING and
	// noted as awaiting the provider. ErrLockLost if the token no longer
	// owns the key; ErrAnswerAwaitsSettlement if the key's answer must be
	// the outcome.
	RecordReceived(ctx context.Context, r Repos, k KeyClaim, t T) (StoredResponse, error)
	// SettleReceived records the provider's decision on t while it awaits
	// it, in one statement that writes no key. false when it awaits it no
	// longer (settled meanwhile); ErrNotReceived when it never did.
	SettleReceived(ctx context.Context, r Repos, t T, s Settlement) (bool, error)
}

// recordReceived records the provider's receipt of the command (the
// verdict RecordReceived) and answers with it; callCtx bounds a lookup,
// as the call was bounded.
func (uc *IdempotentCommand[C, T]) recordReceived(ctx, callCtx context.Context, k KeyClaim, t T, lockEnds time.Time) (_ CommandResult, err error) {
	ctx, span := uc.startPhase(ctx, "record")
	defer func() { endPhase(span, err) }()
	steps, ok := uc.steps.(ReceivedSteps[T])
	if !ok {
		uc.logFor(t).ErrorContext(ctx, "the provider received a command that cannot wait for its event; its outcome is unknown until the provider says more")
		return uc.keepUnknown(ctx, k, errAwaitsEvent, lockEnds)
	}
	resp, err := steps.RecordReceived(ctx, uc.core.db.AutoCommit(), k, t)
	switch {
	case errors.Is(err, ErrAnswerAwaitsSettlement):
		// The claim stays, and the provider's event records the outcome
		// under it. A provider that can be asked may have decided by now
		// (this is a retry, or the completer's, after an event was lost):
		// what it decided is recorded now.
		if uc.steps.Abilities(t).Recovery() != NotifiesOnly {
			if a := AnswerOf(uc.steps.Lookup(callCtx, t)); a == AnswerApproved || a == AnswerDeclined || a == AnswerFailed {
				return uc.record(ctx, k, t, settlementOf(a), lockEnds)
			}
		}
		return uc.keepUnknown(ctx, k, errAwaitsEvent, lockEnds)
	case errors.Is(err, ErrLockLost):
		// The provider's event recorded the outcome first, or another
		// attempt took the key over: the key says which.
		return uc.answerFromKey(ctx, k, true)
	case err != nil:
		uc.logFor(t).ErrorContext(ctx, "recording the provider's receipt failed; the outcome is unknown to the client", "err", err)
		return CommandResult{}, &OutcomeUnknownError{RetryAfter: untilLockEnds(lockEnds), Err: err}
	}
	return CommandResult{Response: resp}, nil
}

// settleReceived records the decision of a reservation whose key is
// answered (a receipt): ErrNotReceived when it awaits no decision.
func (uc *IdempotentCommand[C, T]) settleReceived(ctx context.Context, r Repos, t T, s Settlement) (bool, error) {
	steps, ok := uc.steps.(ReceivedSteps[T])
	if !ok {
		return false, ErrNotReceived
	}
	return steps.SettleReceived(ctx, r, t, s)
}

// ReceivedModification is a capture, void or refund whose provider
// received it and has not decided it, as far as the service knows: it is
// PENDING, its key answered 202.
type ReceivedModification struct {
	// Object is what it is: a capture, a void or a refund.
	Object ProviderObject
	// Provider is where it was sent.
	Provider domain.ProviderName
	// ProviderKey is the key it was sent under, as its event names it.
	ProviderKey string
	// ReceivedAt is when its receipt was recorded.
	ReceivedAt time.Time
}

// SettleReceivedModifications looks the modifications a provider received
// up, once they have waited longer than after for their event, and
// settles the ones it decided as their event would (the same statement).
// A provider that cannot be asked, and one that still says "received",
// leaves them PENDING: for their event, a later run, or the
// reconciliation, which lists them (ListReceived).
type SettleReceivedModifications struct {
	db          Transactor
	transitions map[ProviderObject]*IdempotentCommand[TransitionCommand, transitionReservation]
	refunds     *IdempotentCommand[RefundCommand, refundReservation]
	after       time.Duration
	limit       int
	logger      *slog.Logger
}

// NewSettleReceivedModifications builds the use case over the refunds and
// the transitions (captures, voids) whose received modifications it looks
// up; one run takes at most limit of each table.
func NewSettleReceivedModifications(refunds *RefundPayment, after time.Duration, limit int, logger *slog.Logger, transitions ...*PaymentTransition) *SettleReceivedModifications {
	uc := &SettleReceivedModifications{db: refunds.db, refunds: refunds.run, after: after, limit: limit, logger: logger,
		transitions: map[ProviderObject]*IdempotentCommand[TransitionCommand, transitionReservation]{}}
	for _, t := range transitions {
		uc.transitions[ProviderObject(t.kind)] = t.run
	}
	return uc
}

// ReceivedResult counts what one run did.
type ReceivedResult struct {
	// Settled: the provider had decided, and its decision is recorded.
	Settled int
	// Waiting: the provider has not decided yet, cannot be asked, or its
	// answer was lost: left PENDING.
	Waiting int
	// Failed: left as it was for the next run; each is logged.
	Failed int
}

// Handle looks up one page of received modifications of each kind. It
// stops between modifications when ctx ends.
func (uc *SettleReceivedModifications) Handle(ctx context.Context) (ReceivedResult, error) {
	var res ReceivedResult
	pool := uc.db.AutoCommit()
	transitions, err := pool.Transitions.ListReceived(ctx, uc.after, uc.limit)
	if err != nil {
		return res, err
	}
	refunds, err := pool.Refunds.ListReceived(ctx, uc.after, uc.limit)
	if err != nil {
		return res, err
	}
	for _, m := range append(transitions, refunds...) {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var settled bool
		switch cmd, ok := uc.transitions[m.Object]; {
		case ok:
			settled, err = cmd.lookUpReceived(ctx, m)
		case m.Object == ObjectRefund:
			settled, err = uc.refunds.lookUpReceived(ctx, m)
		default:
			err = fmt.Errorf("a received %s, which this service does not make", m.Object)
		}
		switch {
		case err != nil:
			res.Failed++
			uc.logger.ErrorContext(ctx, "looking a received modification up failed", "object", m.Object, "provider_key", m.ProviderKey, "err", err)
		case settled:
			res.Settled++
		default:
			res.Waiting++
		}
	}
	return res, nil
}

// lookUpReceived asks the provider about m, if it can be asked, and
// records what it decided; false when nothing was recorded.
func (uc *IdempotentCommand[C, T]) lookUpReceived(ctx context.Context, m ReceivedModification) (bool, error) {
	steps, ok := uc.steps.(ReportedSteps[T])
	if !ok {
		return false, fmt.Errorf("the %s command does not take provider events", uc.name)
	}
	pool := uc.core.db.AutoCommit()
	rep, found, err := steps.Reported(ctx, pool, ProviderEvent{Provider: m.Provider, Object: m.Object, ProviderKey: m.ProviderKey})
	switch {
	case err != nil:
		return false, err
	case !found, rep.Status.Final(), rep.Claim != nil:
		// Settled meanwhile, or its claim's again (a manual repair).
		return false, nil
	case uc.steps.Abilities(rep.Reservation).Recovery() == NotifiesOnly:
		return false, nil
	}
	answer := AnswerOf(uc.steps.Lookup(ctx, rep.Reservation))
	switch answer {
	case AnswerApproved, AnswerDeclined, AnswerFailed:
	default:
		return false, nil
	}
	settled, err := uc.settleReceived(ctx, pool, rep.Reservation, settlementOf(answer))
	if errors.Is(err, ErrNotReceived) {
		return false, nil
	}
	return settled, err
}

// ErrModificationNotFound: the client's payment has no capture, void or
// refund with the id asked for (404, nothing stored).
var ErrModificationNotFound = errors.New("the payment has no such capture, void or refund")

// Get returns the capture or void id of one of the client's payments, as
// it stands: PENDING while its provider has not decided (a receipt's 202
// names it), then its final status. domain.ErrPaymentNotFound for a
// payment that is not the client's; ErrModificationNotFound for an id that
// is not a transition of this kind of that payment.
func (uc *PaymentTransition) Get(ctx context.Context, client domain.ClientID, payment domain.PaymentID, id domain.TransitionID) (domain.Transition, error) {
	pool := uc.db.AutoCommit()
	if _, err := clientPayment(ctx, pool, client, payment); err != nil {
		return domain.Transition{}, err
	}
	t, err := pool.Transitions.Get(ctx, id)
	switch {
	case err != nil:
		return domain.Transition{}, err
	case t.PaymentID != payment || t.Kind != uc.kind:
		return domain.Transition{}, ErrModificationNotFound
	}
	return t, nil
}

// Get returns refund id of one of the client's payments, as it stands.
// domain.ErrPaymentNotFound for a payment that is not the client's;
// ErrModificationNotFound for an id that is not a refund of that payment.
func (uc *ListRefunds) Get(ctx context.Context, client domain.ClientID, payment domain.PaymentID, id domain.RefundID) (domain.Refund, error) {
	pool := uc.db.AutoCommit()
	if _, err := clientPayment(ctx, pool, client, payment); err != nil {
		return domain.Refund{}, err
	}
	r, err := pool.Refunds.Get(ctx, id)
	switch {
	case err != nil:
		return domain.Refund{}, err
	case r.PaymentID != payment:
		return domain.Refund{}, ErrModificationNotFound
	}
	return r, nil
}
