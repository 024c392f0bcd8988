package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// ChargePayment charges an order through a payment provider, exactly once
// per idempotency key and exactly once per external payment.
//
// It runs in three atomic phases (the Stripe-style design), so that no
// provider call ever happens inside a database transaction:
//
//  1. claim: one transaction claims the key (insert-if-absent, never
//     find-then-save), checks the order and reserves a PENDING payment row.
//     A duplicate sees the claim and gets 409 request-in-progress or the
//     stored response; it never runs the command.
//  2. call: the provider is called with an idempotency key of its own,
//     derived from the external payment, so calling it again is safe.
//  3. record: one transaction sets the payment's final status, stores the
//     response, fenced by the claim's lock token, and appends the outcome
//     event to the outbox (a relay publishes it after the commit).
//
// A crash between the phases leaves an IN_PROGRESS record whose lock
// expires; the next retry takes it over, finds the reserved payment (the
// recovery point) and resumes from phase 2. The provider's own idempotency
// makes that second call charge nothing new.
type ChargePayment struct {
	tx          Transactor
	providers   map[domain.ProviderName]PaymentProvider
	encoder     ResponseEncoder
	lockTimeout time.Duration
	logger      *slog.Logger
}

// NewChargePayment builds the use case. lockTimeout is how long a claim
// holds a key before a retry may take it over; it must exceed the slowest
// provider call.
func NewChargePayment(tx Transactor, providers map[domain.ProviderName]PaymentProvider, encoder ResponseEncoder, lockTimeout time.Duration, logger *slog.Logger) *ChargePayment {
	return &ChargePayment{tx: tx, providers: providers, encoder: encoder, lockTimeout: lockTimeout, logger: logger}
}

// ChargeResult is the reply for the client.
type ChargeResult struct {
	Response StoredResponse
	// Replayed is true when Response was stored by an earlier request.
	Replayed bool
}

// inProgressRetryAfter is what a duplicate is told to wait. A charge
// usually finishes within a second, far sooner than the lock expires.
const inProgressRetryAfter = time.Second

// Handle runs the command. Errors are ErrKeyReused, *InProgressError,
// ErrUnknownProvider, ErrProviderUnavailable, domain.ErrOrderNotFound,
// domain.ErrOrderMismatch, ErrStoreUnavailable, or unexpected ones.
func (uc *ChargePayment) Handle(ctx context.Context, cmd ChargeCommand) (ChargeResult, error) {
	provider, ok := uc.providers[cmd.Charge.Provider]
	if !ok {
		// Checked before the claim: an invalid command stores nothing, so
		// the client can fix it and retry with the same key.
		return ChargeResult{}, ErrUnknownProvider
	}

	// Once the key is claimed the work must run to a recorded end even if
	// the client goes away: a cancelled request would otherwise leave the
	// key locked until it expires. The lock timeout bounds it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uc.lockTimeout)
	defer cancel()

	token := uuid.New()
	var phase1 claimResult
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		phase1, err = uc.claim(ctx, r, cmd, token)
		return err
	})
	if err != nil {
		return ChargeResult{}, err
	}
	switch {
	case phase1.existing != nil:
		return uc.answerExisting(*phase1.existing, cmd.Hash())
	case phase1.response != nil:
		return ChargeResult{Response: *phase1.response}, nil
	}

	payment := phase1.payment
	decision, err := provider.Charge(ctx, ProviderCharge{
		IdempotencyKey: cmd.Charge.ProviderIdempotencyKey(),
		Charge:         payment.Charge,
	})
	if err != nil {
		uc.logger.WarnContext(ctx, "provider call failed; releasing the key for a retry",
			"payment_id", payment.ID, "provider", cmd.Charge.Provider, "err", err)
		if relErr := uc.release(ctx, cmd.Scope, token, payment.ID); relErr != nil {
			// The lock expires by itself and a retry resumes the payment.
			uc.logger.ErrorContext(ctx, "releasing the key failed", "err", relErr)
		}
		return ChargeResult{}, fmt.Errorf("%w: %v", ErrProviderUnavailable, err)
	}

	outcome := ChargeOutcome{Kind: OutcomeCharged}
	status := domain.PaymentSucceeded
	if decision == ProviderDeclined {
		outcome.Kind, status = OutcomeDeclined, domain.PaymentDeclined
	}
	var resp StoredResponse
	err = uc.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		p, err := r.Payments.SetStatus(ctx, payment.ID, status)
		if err != nil {
			return err
		}
		outcome.Payment = p
		if resp, err = uc.encoder.EncodeChargeOutcome(outcome); err != nil {
			return err
		}
		if err := r.Idempotency.Complete(ctx, cmd.Scope, token, resp); err != nil {
			return err
		}
		return appendOutcomeEvent(ctx, r, p)
	})
	if errors.Is(err, ErrLockLost) {
		// Our lock expired and another request took the key over; it will
		// record the same provider decision. The client's retry replays it.
		return ChargeResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	if err != nil {
		return ChargeResult{}, err
	}
	return ChargeResult{Response: resp}, nil
}

// appendOutcomeEvent writes the event of the payment's PENDING->final
// transition to the outbox, inside phase 3's transaction.
//
// Exactly one event per payment outcome: only phase 3 appends one, and
// phase 3 commits at most once per payment. The payment is linked to one
// idempotency record (its recovery point), and Complete succeeds only for
// the claim that still owns that record; an owner whose lock was taken over
// gets ErrLockLost and the whole transaction, event included, rolls back.
// Replays, the second layer and the crash-recovery path in claim record a
// response without a transition, so they append nothing.
func appendOutcomeEvent(ctx context.Context, r Repos, p domain.Payment) error {
	saga, err := r.Orders.SagaID(ctx, p.Charge.OrderID)
	if err != nil {
		return err
	}
	event, err := NewPaymentEvent(p, saga, time.Now())
	if err != nil {
		return err
	}
	return r.Outbox.AppendPaymentEvent(ctx, event)
}

// claimResult is what phase 1 decided: exactly one field is set.
type claimResult struct {
	existing *IdempotencyRecord // the key was not claimed: answer from it
	response *StoredResponse    // claimed and completed at once (second layer)
	payment  domain.Payment     // claimed: charge this PENDING payment
}

func (uc *ChargePayment) claim(ctx context.Context, r Repos, cmd ChargeCommand, token uuid.UUID) (claimResult, error) {
	rec, claimed, err := r.Idempotency.Claim(ctx, Claim{
		Scope:       cmd.Scope,
		CommandHash: cmd.Hash(),
		Token:       token,
		LockFor:     uc.lockTimeout,
	})
	if err != nil {
		return claimResult{}, err
	}
	if !claimed {
		return claimResult{existing: &rec}, nil
	}

	if rec.PaymentID != nil {
		// A takeover: an earlier request crashed after reserving the payment.
		p, err := r.Payments.Get(ctx, *rec.PaymentID)
		if err != nil {
			return claimResult{}, err
		}
		if !p.Status.Final() {
			return claimResult{payment: p}, nil
		}
		// A final payment under a claim still in progress: phase 3 sets the
		// status and completes the record in one transaction, so this only
		// happens after a manual repair of the tables. The provider has
		// answered; record that answer without asking again (and without a
		// second event: the status transition already wrote one).
		resp, err := uc.encodeFinal(p, OutcomeCharged)
		if err != nil {
			return claimResult{}, err
		}
		return claimResult{response: &resp}, r.Idempotency.Complete(ctx, cmd.Scope, token, resp)
	}

	// Order check. Returning an error rolls the claim back: an unknown or
	// mismatching order is not stored as the key's outcome, so a retry
	// after the order arrives succeeds.
	order, err := r.Orders.Get(ctx, cmd.Charge.OrderID)
	if err != nil {
		return claimResult{}, err
	}
	if err := order.Accepts(cmd.Charge); err != nil {
		return claimResult{}, err
	}

	p, created, err := r.Payments.Reserve(ctx, cmd.Scope.ClientID, cmd.Charge)
	if err != nil {
		return claimResult{}, err
	}
	if created {
		return claimResult{payment: p}, r.Idempotency.SetRecoveryPoint(ctx, cmd.Scope, token, p.ID)
	}

	// R-DIST-IDEM-4, the second layer: this external payment is already
	// recorded under another key.
	if !p.IsSameCharge(cmd.Scope.ClientID, cmd.Charge) {
		resp, err := uc.encoder.EncodeChargeOutcome(ChargeOutcome{Kind: OutcomeExternalPaymentConflict})
		if err != nil {
			return claimResult{}, err
		}
		return claimResult{response: &resp}, r.Idempotency.Complete(ctx, cmd.Scope, token, resp)
	}
	if !p.Status.Final() {
		// The same charge is being made right now under another key. Roll
		// back: nothing is stored, and the retry finds it finished.
		return claimResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	resp, err := uc.encodeFinal(p, OutcomeAlreadyRecorded)
	if err != nil {
		return claimResult{}, err
	}
	return claimResult{response: &resp}, r.Idempotency.Complete(ctx, cmd.Scope, token, resp)
}

// encodeFinal renders a payment that already has the provider's answer:
// a decline is always a decline; a success is reported as kind.
func (uc *ChargePayment) encodeFinal(p domain.Payment, kind OutcomeKind) (StoredResponse, error) {
	if p.Status == domain.PaymentDeclined {
		kind = OutcomeDeclined
	}
	return uc.encoder.EncodeChargeOutcome(ChargeOutcome{Kind: kind, Payment: p})
}

// answerExisting answers a request whose key is held by a record it could
// not claim.
func (uc *ChargePayment) answerExisting(rec IdempotencyRecord, hash string) (ChargeResult, error) {
	switch {
	case rec.CommandHash != hash:
		return ChargeResult{}, ErrKeyReused
	case rec.Status == RecordCompleted:
		return ChargeResult{Response: rec.Response, Replayed: true}, nil
	default:
		return ChargeResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
}

// release gives the key back after a transient provider failure: the claim
// and its PENDING payment go, in one transaction, only if we still own the
// claim (a new owner needs the payment as its recovery point).
func (uc *ChargePayment) release(ctx context.Context, scope IdempotencyScope, token uuid.UUID, payment domain.PaymentID) error {
	return uc.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		if err := r.Idempotency.Release(ctx, scope, token); err != nil {
			return err
		}
		return r.Payments.DeletePending(ctx, payment)
	})
}
