package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/domain"
)

// ChargePayment charges an order through a payment provider, exactly once
// per idempotency key, per external payment and per order.
//
// First it reads the key's record, with no lock and no transaction: a
// replay of a completed key, a reused key and a duplicate meeting a live
// lock are answered from that one read, and write nothing. Anything else
// runs in three atomic phases (the Stripe-style design), so that no
// provider call ever happens inside a database transaction:
//
//  1. claim: one statement, committed on its own, reserves a PENDING
//     payment row and claims the key (insert-if-absent, never
//     find-then-save) linked to it, checking the order. A duplicate sees
//     the claim and gets 409 request-in-progress or the stored response; it
//     never runs the command. The rare answers (the key is held, the order
//     does not match, a payment is in the way) roll the statement back,
//     and it runs again in a transaction, where they take further
//     statements.
//  2. call: the provider is called with an idempotency key of its own,
//     derived from the external payment, so calling it again is safe.
//  3. record: one statement, atomic on its own, sets the payment's final
//     status, stores the response, fenced by the claim's lock token, and
//     appends the outcome event to the outbox (a relay publishes it after
//     the commit).
//
// The provider's answer can be lost (PaymentProvider lists the cases).
// Only a "not charged for now" answer to a payment this request reserved
// itself gives the key back, and only a refusal for good that the
// provider's own record confirms (settleFailedCall) ends a payment FAILED;
// every other failure after the call keeps the claim and its PENDING
// payment, ends the lock early and answers OutcomeUnknownError: the next
// retry with the key, or the completer, asks the provider again with the
// same provider key and records its answer.
//
// A crash between the phases leaves an IN_PROGRESS record whose lock
// expires; the next retry takes it over, finds the reserved payment (the
// recovery point) and resumes from phase 2. The provider's own idempotency
// makes that second call charge nothing new.
type ChargePayment struct {
	tx          Transactor
	store       ChargeStore
	providers   map[domain.ProviderName]PaymentProvider
	encoder     ResponseEncoder
	lockTimeout time.Duration
	logger      *slog.Logger
	running     *runningCharges // for Drain, at shutdown
	tracer      trace.Tracer
}

// NewChargePayment builds the use case. lockTimeout is how long a claim
// holds a key before a retry may take it over; it must exceed the slowest
// provider call.
func NewChargePayment(tx Transactor, store ChargeStore, providers map[domain.ProviderName]PaymentProvider, encoder ResponseEncoder, lockTimeout time.Duration, logger *slog.Logger, opts ...ChargeOption) *ChargePayment {
	uc := &ChargePayment{tx: tx, store: store, providers: providers, encoder: encoder, lockTimeout: lockTimeout, logger: logger,
		running: newRunningCharges(), tracer: noop.NewTracerProvider().Tracer("")}
	for _, opt := range opts {
		opt(uc)
	}
	return uc
}

// ChargeOption configures ChargePayment.
type ChargeOption func(*ChargePayment)

// WithTracer makes each database phase a span of its own ("charge claim",
// "charge record", "charge settle failed call"), so a trace shows where a
// charge spent its time; the provider call is the provider adapter's span.
// Without it the spans go to a no-op tracer.
func WithTracer(t trace.Tracer) ChargeOption {
	return func(uc *ChargePayment) { uc.tracer = t }
}

// startPhase starts the span of one phase of Handle.
func (uc *ChargePayment) startPhase(ctx context.Context, name string, cmd ChargeCommand) (context.Context, trace.Span) {
	return uc.tracer.Start(ctx, name, trace.WithAttributes(
		attribute.Int64("payment.order_id", int64(cmd.Charge.OrderID)),
		attribute.String("payment.provider", string(cmd.Charge.Provider)),
	))
}

// endPhase ends a phase's span, marking it failed if err is set.
func endPhase(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// ChargeResult is the reply for the client.
type ChargeResult struct {
	// Response is the answer: status and body bytes, as stored for the key.
	Response StoredResponse
	// Replayed is true when Response was stored by an earlier request.
	Replayed bool
}

// inProgressRetryAfter is what a duplicate is told to wait when there is no
// lock to measure (the same charge under another key), and the least it is
// ever told. A charge usually finishes within a second.
const inProgressRetryAfter = time.Second

// finishTimeout bounds the database work after the provider call (record,
// release, lock expiry). It is detached from the lock's deadline on purpose:
// a provider that answered just before the lock ran out still gets its
// answer recorded, and the lock token's fence turns the write away if
// another request has taken the key over meanwhile.
const finishTimeout = 10 * time.Second

// Handle runs the command. Errors are ErrKeyReused, *InProgressError,
// *OutcomeUnknownError, ErrUnknownProvider, ErrProviderUnavailable,
// domain.ErrOrderNotFound, domain.ErrOrderMismatch, ErrStoreUnavailable (only
// before the provider is called), or unexpected ones.
func (uc *ChargePayment) Handle(ctx context.Context, cmd ChargeCommand) (ChargeResult, error) {
	provider, ok := uc.providers[cmd.Charge.Provider]
	if !ok {
		// Checked before the claim: an invalid command stores nothing, so
		// the client can fix it and retry with the same key.
		return ChargeResult{}, ErrUnknownProvider
	}

	// Once the key is claimed the work must run to a recorded end even if
	// the client goes away: a cancelled request would otherwise leave the
	// key locked until it expires. The lock timeout bounds the provider call,
	// and a shutdown that runs out of time aborts it (Drain); the work after
	// the call (finishCtx) is detached from both, so an answer that arrived
	// is still recorded.
	detached := context.WithoutCancel(ctx)
	ctx, done := uc.running.start(detached, cmd.Scope, uc.lockTimeout)
	defer done()

	hash := cmd.Hash()
	rec, found, err := uc.store.LookupKey(ctx, cmd.Scope)
	if err != nil {
		return ChargeResult{}, err
	}
	if found && !takeable(rec, hash) {
		return uc.answerExisting(rec, hash)
	}

	token := uuid.New()
	claimedAt := time.Now()
	claimCtx, span := uc.startPhase(ctx, "charge claim", cmd)
	phase1, err := uc.claimAtOnce(claimCtx, cmd, hash, token)
	if errors.Is(err, ErrClaimNeedsTransaction) {
		// A rare answer: the statement rolled back. It runs again in a
		// transaction, where that answer takes further statements.
		err = uc.tx.Transact(claimCtx, func(ctx context.Context, r Repos) (err error) {
			phase1, err = uc.claim(ctx, r, cmd, hash, token)
			return err
		})
	}
	endPhase(span, err)
	var held *keyHeldError
	switch {
	case errors.As(err, &held):
		return uc.answerExisting(held.rec, hash)
	case errors.Is(err, ErrReserveContended):
		return ChargeResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	case err != nil:
		return ChargeResult{}, err
	case phase1.response != nil:
		return ChargeResult{Response: *phase1.response}, nil
	}

	payment := phase1.payment
	providerKey := cmd.Charge.ProviderIdempotencyKey()
	decision, callErr := provider.Charge(ctx, ProviderCharge{IdempotencyKey: providerKey, Charge: payment.Charge})

	finishCtx, finishCancel := context.WithTimeout(detached, finishTimeout)
	defer finishCancel()
	status := decidedStatus(decision)
	if callErr != nil {
		settleCtx, span := uc.startPhase(finishCtx, "charge settle failed call", cmd)
		status, err = uc.settleFailedCall(settleCtx, provider, providerKey, cmd.Scope, token, phase1, claimedAt, callErr)
		endPhase(span, err)
		if err != nil {
			return ChargeResult{}, err
		}
	}
	recordCtx, span := uc.startPhase(finishCtx, "charge record", cmd)
	resp, err := uc.record(recordCtx, cmd.Scope, token, phase1, status)
	endPhase(span, err)
	switch {
	case errors.Is(err, ErrLockLost):
		// Our lock expired and another request took the key over; it will
		// record the same provider decision. The client's retry replays it.
		return ChargeResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	case err != nil:
		// The provider has answered, so "nothing happened" would be a lie.
		// The claim is still ours until its lock runs out; then a retry
		// takes it over and asks the provider, which answers the same.
		uc.logger.ErrorContext(ctx, "recording the provider's answer failed; the outcome is unknown to the client",
			"payment_id", payment.ID, "status", status, "err", err)
		return ChargeResult{}, &OutcomeUnknownError{RetryAfter: lockRetryAfter(claimedAt.Add(uc.lockTimeout), time.Now()), Err: err}
	}
	return ChargeResult{Response: resp}, nil
}

// decidedStatus is the payment status a provider decision records.
func decidedStatus(d ProviderDecision) domain.PaymentStatus {
	if d == ProviderDeclined {
		return domain.PaymentDeclined
	}
	return domain.PaymentSucceeded
}

// outcomeKinds is the answer each final status of a new payment gets.
var outcomeKinds = map[domain.PaymentStatus]OutcomeKind{
	domain.PaymentSucceeded: OutcomeCharged,
	domain.PaymentDeclined:  OutcomeDeclined,
	domain.PaymentFailed:    OutcomeFailed,
}

// record is phase 3: the payment's final status, the stored response and
// the outbox event, in one statement fenced by the lock token.
func (uc *ChargePayment) record(ctx context.Context, scope IdempotencyScope, token uuid.UUID, phase1 claimResult, status domain.PaymentStatus) (StoredResponse, error) {
	outcome := ChargeOutcome{Kind: outcomeKinds[status], Payment: phase1.payment}
	outcome.Payment.Status = status
	resp, err := uc.encoder.EncodeChargeOutcome(outcome)
	if err != nil {
		return StoredResponse{}, err
	}
	// Exactly one event per payment outcome: only phase 3 appends one, and
	// it commits at most once per payment. The payment is linked to one
	// idempotency record (its recovery point), and the statement writes
	// only for the claim that still owns that record; an owner whose lock
	// was taken over gets ErrLockLost and writes nothing, event included.
	// Replays, the second and third layers and the repair path in claim
	// store a response without a transition, so they append nothing.
	event, err := NewPaymentEvent(outcome.Payment, phase1.saga, time.Now())
	if err != nil {
		return StoredResponse{}, err
	}
	err = uc.store.RecordOutcome(ctx, OutcomeRecord{Scope: scope, Token: token, Response: resp, Event: event})
	return resp, err
}

// settleFailedCall decides what a provider call that brought no decision
// leaves behind: a final status for phase 3 to record, or an error for the
// client with the claim released or kept.
//
// A refusal speaks for this request only. For a payment this very request
// reserved, no earlier request used its provider key, so a refusal is the
// whole truth: refused for good, the payment is recorded FAILED (a final
// answer); refused for now, the key and the payment are given back for a
// retry. A resumed payment was handed to the provider by an earlier attempt
// whose answer never arrived, and a provider refuses a retry before it
// looks at the key, so the provider's record under the key settles it: the
// charge it holds is recorded as any decision; no charge, after a refusal
// for good, is FAILED. Everything else is unknown, and an unknown outcome
// never deletes anything: the claim stays with its PENDING payment, and the
// lock ends now so that the client's retry resumes at once.
func (uc *ChargePayment) settleFailedCall(ctx context.Context, provider PaymentProvider, providerKey string, scope IdempotencyScope, token uuid.UUID, phase1 claimResult, claimedAt time.Time, callErr error) (domain.PaymentStatus, error) {
	log := uc.logger.With("payment_id", phase1.payment.ID, "provider", phase1.payment.Charge.Provider, "err", callErr)
	refusedForGood := errors.Is(callErr, ErrProviderRefused)
	switch {
	case !errors.Is(callErr, ErrProviderNotCharged):
		// Unknown: below.
	case !phase1.resumed && refusedForGood:
		log.WarnContext(ctx, "the provider refused the charge for good; recording it FAILED")
		return domain.PaymentFailed, nil
	case !phase1.resumed:
		log.WarnContext(ctx, "the provider did not charge; releasing the key for a retry")
		return "", uc.releaseForRetry(ctx, scope, token, phase1.payment.ID, claimedAt, callErr)
	default:
		decision, err := provider.LookupCharge(ctx, providerKey)
		switch {
		case err == nil:
			log.InfoContext(ctx, "a resumed charge was refused; the provider holds its decision under the key", "decision", decision)
			return decidedStatus(decision), nil
		case errors.Is(err, ErrNoProviderCharge) && refusedForGood:
			log.WarnContext(ctx, "a resumed charge was refused for good and the provider holds no charge under its key; recording it FAILED")
			return domain.PaymentFailed, nil
		case !errors.Is(err, ErrNoProviderCharge):
			log = log.With("lookup_err", err)
		}
	}

	log.WarnContext(ctx, "provider outcome unknown; the payment stays PENDING for the retry or the completer",
		"resumed", phase1.resumed)
	retryAfter := inProgressRetryAfter
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		return r.Idempotency.ExpireLock(ctx, scope, token)
	})
	if err != nil {
		// The lock runs out on its own; until then a retry is in progress.
		retryAfter = lockRetryAfter(claimedAt.Add(uc.lockTimeout), time.Now())
		if !errors.Is(err, ErrLockLost) {
			uc.logger.ErrorContext(ctx, "ending the lock early failed", "err", err)
		}
	}
	return "", &OutcomeUnknownError{RetryAfter: retryAfter, Err: callErr}
}

// releaseForRetry gives the key back after the provider said it did not
// charge, for now, a payment this request reserved: nothing can have been
// charged for it, ever, so the retry may run the command afresh.
func (uc *ChargePayment) releaseForRetry(ctx context.Context, scope IdempotencyScope, token uuid.UUID, payment domain.PaymentID, claimedAt time.Time, callErr error) error {
	err := uc.release(ctx, scope, token, payment)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %v", ErrProviderUnavailable, callErr)
	case errors.Is(err, ErrLockLost):
		// Our lock ran out during the call and another request took the
		// key over: it resumed the payment and asks the provider itself.
		// Its answer is the key's, so "nothing was recorded" would be
		// false; the retry gets that answer.
		return &InProgressError{RetryAfter: inProgressRetryAfter}
	default:
		// The claim and its payment stay until the lock runs out; the
		// retry then takes the key over and asks the provider again.
		uc.logger.ErrorContext(ctx, "releasing the key failed", "err", err)
		return &InProgressError{RetryAfter: lockRetryAfter(claimedAt.Add(uc.lockTimeout), time.Now())}
	}
}

// claimResult is what phase 1 decided: either response (the key was
// claimed and completed at once, by the second or third layer) or payment
// (charge it) is set.
type claimResult struct {
	response *StoredResponse
	payment  domain.Payment
	saga     uuid.NullUUID
	// resumed: the payment was reserved by an earlier attempt (a takeover),
	// which may have reached the provider.
	resumed bool
}

// keyHeldError: the key was not claimed; answer from its record. It rolls
// phase 1 back, with whatever the statement reserved.
type keyHeldError struct{ rec IdempotencyRecord }

func (e *keyHeldError) Error() string { return "idempotency key held" }

// takeable reports whether a claim could take the record over: an
// IN_PROGRESS claim of the same command whose lock has run out, by this
// process's clock. The claim statement decides by the database's; this
// only spares it the records it would certainly refuse.
func takeable(rec IdempotencyRecord, hash string) bool {
	return rec.CommandHash == hash && rec.Status == RecordInProgress && !rec.LockedUntil.After(time.Now())
}

// chargeClaim is phase 1's statement's input.
func (uc *ChargePayment) chargeClaim(cmd ChargeCommand, hash string, token uuid.UUID) ChargeClaim {
	return ChargeClaim{Scope: cmd.Scope, CommandHash: hash, Token: token, LockFor: uc.lockTimeout, Charge: cmd.Charge}
}

// claimAtOnce is phase 1 in one round trip: the statement commits on its
// own when its answer is the usual one, the key claimed with a PENDING
// payment to charge (reserved now, or resumed after a takeover). Every other
// answer is ErrClaimNeedsTransaction, with nothing committed.
func (uc *ChargePayment) claimAtOnce(ctx context.Context, cmd ChargeCommand, hash string, token uuid.UUID) (claimResult, error) {
	res, err := uc.store.ClaimAndReserve(ctx, uc.chargeClaim(cmd, hash, token))
	if err != nil {
		return claimResult{}, err
	}
	if !res.Claimed || res.Payment == nil {
		return claimResult{}, fmt.Errorf("phase 1 committed without a payment to charge (claimed %v)", res.Claimed)
	}
	return claimResult{payment: *res.Payment, saga: res.SagaID, resumed: !res.Reserved}, nil
}

// claim is phase 1 inside a transaction, for the answers claimAtOnce does
// not commit.
func (uc *ChargePayment) claim(ctx context.Context, r Repos, cmd ChargeCommand, hash string, token uuid.UUID) (claimResult, error) {
	res, err := r.Charges.ClaimAndReserve(ctx, uc.chargeClaim(cmd, hash, token))
	if err != nil {
		return claimResult{}, err
	}
	switch {
	case !res.Claimed:
		// Another request holds the key, or it holds another command. A new
		// statement sees the record as committed now.
		rec, found, err := r.Idempotency.Get(ctx, cmd.Scope)
		if err != nil {
			return claimResult{}, err
		}
		if !found { // gone between the two statements (released, purged)
			return claimResult{}, ErrReserveContended
		}
		return claimResult{}, &keyHeldError{rec: rec}
	case res.Reserved:
		return claimResult{payment: *res.Payment, saga: res.SagaID}, nil
	case res.Payment != nil && !res.Payment.Status.Final():
		// A takeover: an earlier request crashed, or lost the provider's
		// answer, after reserving the payment.
		return claimResult{payment: *res.Payment, saga: res.SagaID, resumed: true}, nil
	case res.Payment != nil:
		// A final payment under a claim still in progress: phase 3 sets the
		// status and completes the record in one statement, so this only
		// happens after a manual repair of the tables. The provider has
		// answered; record that answer without asking again (and without a
		// second event: the status transition already wrote one).
		return uc.completeWith(ctx, r, cmd.Scope, token, *res.Payment, OutcomeCharged)
	case !res.OrderMatches:
		// Returning an error rolls the claim back: an unknown or
		// mismatching order is not stored as the key's outcome, so a retry
		// after the order arrives succeeds.
		order, err := r.Orders.Get(ctx, cmd.Charge.OrderID)
		if err != nil {
			return claimResult{}, err
		}
		if err := order.Accepts(cmd.Charge); err != nil {
			return claimResult{}, err
		}
		// The order changed between the statements: let the retry see it.
		return claimResult{}, ErrReserveContended
	}

	// Claimed, the order matches, and a payment stood in the way of the
	// reservation. Reserve reads which (or reserves, if it has gone since).
	in, err := r.Payments.Reserve(ctx, cmd.Scope.ClientID, cmd.Charge)
	if err != nil {
		return claimResult{}, err
	}
	switch in.Kind {
	case Reserved:
		return claimResult{payment: in.Payment, saga: res.SagaID}, r.Idempotency.SetRecoveryPoint(ctx, cmd.Scope, token, in.Payment.ID)
	case ExternalPaymentExists:
		return uc.secondLayer(ctx, r, cmd, token, in.Payment)
	case OrderHasLivePayment:
		return uc.thirdLayer(ctx, r, cmd.Scope, token, in.Payment)
	default:
		return claimResult{}, fmt.Errorf("reserve payment: unknown reservation kind %d", in.Kind)
	}
}

// secondLayer answers a new key for an external payment that is already
// recorded (R-DIST-IDEM-4): the same charge gets the existing payment, any
// other charge a conflict; neither reaches the provider.
func (uc *ChargePayment) secondLayer(ctx context.Context, r Repos, cmd ChargeCommand, token uuid.UUID, existing domain.Payment) (claimResult, error) {
	if !existing.IsSameCharge(cmd.Scope.ClientID, cmd.Charge) {
		return uc.completeWith(ctx, r, cmd.Scope, token, domain.Payment{}, OutcomeExternalPaymentConflict)
	}
	if !existing.Status.Final() {
		// The same charge is being made right now under another key. Roll
		// back: nothing is stored, and the retry finds it finished.
		return claimResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	return uc.completeWith(ctx, r, cmd.Scope, token, existing, OutcomeAlreadyRecorded)
}

// thirdLayer answers a charge for an order that already has a live payment
// under another external payment: one paid order is paid once, whatever
// keys and external payments the client makes up (R-DIST-IDEM-X3's careless
// client, or a new provider payment intent per attempt).
func (uc *ChargePayment) thirdLayer(ctx context.Context, r Repos, scope IdempotencyScope, token uuid.UUID, live domain.Payment) (claimResult, error) {
	if live.Status == domain.PaymentPending {
		// Another payment for the order is in flight (or its outcome is
		// unknown). Roll back: the retry sees how it ended. If it is
		// declined, this charge may go ahead.
		return claimResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	return uc.completeWith(ctx, r, scope, token, domain.Payment{}, OutcomeOrderAlreadyPaid)
}

// completeWith stores an answer that needs no provider call as the key's
// outcome, in phase 1's transaction.
func (uc *ChargePayment) completeWith(ctx context.Context, r Repos, scope IdempotencyScope, token uuid.UUID, p domain.Payment, kind OutcomeKind) (claimResult, error) {
	if p.Status == domain.PaymentDeclined || p.Status == domain.PaymentFailed {
		kind = outcomeKinds[p.Status]
	}
	resp, err := uc.encoder.EncodeChargeOutcome(ChargeOutcome{Kind: kind, Payment: p})
	if err != nil {
		return claimResult{}, err
	}
	return claimResult{response: &resp}, r.Idempotency.Complete(ctx, scope, token, resp)
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
		return ChargeResult{}, &InProgressError{RetryAfter: lockRetryAfter(rec.LockedUntil, time.Now())}
	}
}

// lockRetryAfter is what a duplicate that meets a live claim is told to
// wait: the time the lock has left, at least inProgressRetryAfter (the
// HTTP layer rounds it up to whole seconds). Before that the retry can only
// meet the same lock, whether its owner is working or crashed; after it the
// retry gets the stored answer or takes the claim over. locked_until is set
// by the database clock; a skew between it and ours makes a retry meet the
// lock once more and be told the rest.
func lockRetryAfter(lockedUntil, now time.Time) time.Duration {
	return max(lockedUntil.Sub(now), inProgressRetryAfter)
}

// release gives the key back after the provider said it did not charge:
// the claim and its PENDING payment go, in one transaction, only if we
// still own the claim (a new owner needs the payment as its recovery point).
func (uc *ChargePayment) release(ctx context.Context, scope IdempotencyScope, token uuid.UUID, payment domain.PaymentID) error {
	return uc.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		if err := r.Idempotency.Release(ctx, scope, token); err != nil {
			return err
		}
		return r.Payments.DeletePending(ctx, payment)
	})
}
