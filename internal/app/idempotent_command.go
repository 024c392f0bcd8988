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

// This file is the core that every command that moves money through a
// provider shares: the charge today, a refund next. It runs a command in
// three atomic phases (the Stripe-style design), so that no provider call
// ever happens inside a database transaction:
//
//  0. read: the key's record, with no lock and no transaction. A replay of
//     a completed key, a reused key and a duplicate meeting a live lock are
//     answered from that one read, and write nothing.
//  1. claim: the key is claimed (insert-if-absent, never find-then-save)
//     together with the command's reservation, its recovery point, in one
//     statement committed on its own. The rare answers (the key is held,
//     the reservation meets another row) roll that statement back and run
//     again in a transaction, where they take further statements.
//  2. call: the provider is called with an idempotency key of its own,
//     derived from the command's business identity, so calling it again is
//     safe.
//  3. record: one statement, atomic on its own, sets the reservation's final
//     status, stores the response fenced by the claim's lock token, and
//     appends the outcome event to the outbox.
//
// A call that brings no decision is settled by the outcome model
// (settleFailedCall): refused for good, not charged for now, or unknown;
// an unknown outcome never deletes anything. A crash between the phases
// leaves an IN_PROGRESS record whose lock expires; the next retry with the
// key, or the completer, takes it over, finds the reservation and resumes
// from phase 2.
//
// A command supplies only what is its own (CommandSteps): its scope and
// hash, its claim and reservation, its provider call and lookup, its
// record, and how to give its reservation back. docs/adding-a-command.md
// says how to write one.

// CommandSteps are the parts of a money-moving command that are its own.
// C is the validated command; T is its reservation, the recovery point that
// phase 1 writes with the claim and phases 2 and 3 act on (a payment for a
// charge).
type CommandSteps[C, T any] interface {
	// Name names the command in spans ("charge claim") and logs.
	Name() string
	// Key is the command's idempotency scope and its command hash.
	Key(cmd C) (IdempotencyScope, string)
	// SpanAttributes describe the command on each phase's span.
	SpanAttributes(cmd C) []attribute.KeyValue

	// ClaimAtOnce is phase 1 as one statement committed on its own. It
	// commits only the usual answer, the key claimed with a reservation to
	// call the provider for (new, or a takeover's), and returns
	// ErrClaimNeedsTransaction, with nothing committed, for any other.
	ClaimAtOnce(ctx context.Context, cmd C, k KeyClaim) (Claimed[T], error)
	// Claim is phase 1 inside the core's transaction, for the answers
	// ClaimAtOnce does not commit. An error rolls the claim back with
	// everything the statement reserved.
	Claim(ctx context.Context, r Repos, cmd C, k KeyClaim) (Claimed[T], error)

	// Call asks the provider to carry the reservation out (phase 2). Its
	// errors are PaymentProvider's cases.
	Call(ctx context.Context, t T) (ProviderDecision, error)
	// Lookup asks the provider what it holds under the reservation's
	// provider key, without acting (PaymentProvider.LookupCharge's cases).
	Lookup(ctx context.Context, t T) (ProviderDecision, error)
	// Record is phase 3: the reservation's final status, the response
	// stored for the key and the outcome event, in one statement fenced by
	// k.Token. ErrLockLost if the token no longer owns the key.
	Record(ctx context.Context, k KeyClaim, t T, s Settlement) (StoredResponse, error)
	// LockParents locks, first in the core's transaction that releases the
	// key, the rows the command's claim statement locks before it claims
	// the key (docs/adding-a-command.md, "Lock order"). Without it the
	// release would hold the key and wait for them while a claim of the
	// same key held them and waited for the key: a deadlock. A command
	// whose claim locks no row before its key locks nothing here.
	LockParents(ctx context.Context, r Repos, t T) error
	// GiveBack deletes the reservation, in the core's transaction that
	// releases the key: the provider did not act on it, for now.
	GiveBack(ctx context.Context, r Repos, t T) error
	// LogAttrs name the reservation in log lines.
	LogAttrs(t T) []any
}

// KeyClaim is one attempt's claim of a key: what phase 1 writes and every
// later write is fenced by.
type KeyClaim struct {
	// Scope is the key to claim.
	Scope IdempotencyScope
	// CommandHash is the command's hash: a takeover requires the same one.
	CommandHash string
	// Token proves ownership when completing or releasing.
	Token uuid.UUID
	// LockFor is how long the claim blocks duplicates.
	LockFor time.Duration
}

// Claimed is what phase 1 decided: the key completed at once by an answer
// that needs no provider call, claimed with a reservation to call the
// provider for, or held by another record, which the core answers from.
type Claimed[T any] struct {
	// Response is the key's answer when phase 1 completed it at once.
	Response *StoredResponse
	// Reservation is what to call the provider for, when Response is nil.
	Reservation T
	// Resumed: an earlier attempt made the reservation (a takeover), and it
	// may have reached the provider.
	Resumed bool
	// KeyHeld: another record holds the key (Claim only); nothing of the
	// statement may stay.
	KeyHeld bool
}

// Settlement is how a provider call ended, for phase 3 to record.
type Settlement string

const (
	// SettledApproved: the provider carried the command out.
	SettledApproved Settlement = "APPROVED"
	// SettledDeclined: the provider decided, and declined.
	SettledDeclined Settlement = "DECLINED"
	// SettledFailed: the provider refused for good and holds nothing under
	// the provider key: nothing happened, and asking again changes nothing.
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

// settlementOf is the settlement a provider decision records.
func settlementOf(d ProviderDecision) Settlement {
	if d == ProviderDeclined {
		return SettledDeclined
	}
	return SettledApproved
}

// CommandResult is the reply for the client.
type CommandResult struct {
	// Response is the answer: status and body bytes, as stored for the key.
	Response StoredResponse
	// Replayed is true when Response was stored by an earlier request.
	Replayed bool
}

// IdempotentCommand runs one kind of command through the core.
type IdempotentCommand[C, T any] struct {
	core  *Core
	steps CommandSteps[C, T]
}

// Core is what the commands of one process share: the transaction
// boundary, the lock timeout, the logger, the tracer, and the set of
// commands in flight that a shutdown drains.
type Core struct {
	tx          Transactor
	keys        KeyReader
	lockTimeout time.Duration
	logger      *slog.Logger
	tracer      trace.Tracer
	running     *runningCommands
}

// KeyReader reads a key's record in one statement, with no lock and no
// transaction: phase 0, on every request.
type KeyReader interface {
	// LookupKey reads a key's record without locking or writing anything.
	LookupKey(ctx context.Context, scope IdempotencyScope) (rec IdempotencyRecord, found bool, err error)
}

// NewCore builds the shared core. lockTimeout is how long a claim holds a
// key before a retry may take it over; it must exceed the slowest provider
// call. Without WithTracer the spans go to a no-op tracer.
func NewCore(tx Transactor, keys KeyReader, lockTimeout time.Duration, logger *slog.Logger, opts ...CoreOption) *Core {
	c := &Core{tx: tx, keys: keys, lockTimeout: lockTimeout, logger: logger, tracer: noop.NewTracerProvider().Tracer(""), running: newRunningCommands()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// CoreOption configures the Core.
type CoreOption func(*Core)

// WithTracer makes each database phase a span of its own ("charge claim",
// "charge record", "charge settle failed call"), so a trace shows where a
// command spent its time; the provider call is the provider adapter's span.
func WithTracer(t trace.Tracer) CoreOption {
	return func(c *Core) { c.tracer = t }
}

// NewIdempotentCommand binds a command's steps to the core.
func NewIdempotentCommand[C, T any](core *Core, steps CommandSteps[C, T]) *IdempotentCommand[C, T] {
	return &IdempotentCommand[C, T]{core: core, steps: steps}
}

// inProgressRetryAfter is what a duplicate is told to wait when there is no
// lock to measure (the same business operation under another key), and the
// least it is ever told. A command usually finishes within a second.
const inProgressRetryAfter = time.Second

// finishTimeout bounds the database work after the provider call (record,
// release, lock expiry). It is detached from the lock's deadline on purpose:
// a provider that answered just before the lock ran out still gets its
// answer recorded, and the lock token's fence turns the write away if
// another request has taken the key over meanwhile.
const finishTimeout = 10 * time.Second

// Handle runs the command. Errors are ErrKeyReused, *InProgressError,
// *OutcomeUnknownError, ErrProviderUnavailable, ErrStoreUnavailable (only
// before the provider is called), the steps' own errors from phase 1 (such
// as domain.ErrOrderNotFound), or unexpected ones.
func (uc *IdempotentCommand[C, T]) Handle(ctx context.Context, cmd C) (CommandResult, error) {
	scope, hash := uc.steps.Key(cmd)
	// Once the key is claimed the work must run to a recorded end even if
	// the client goes away: a cancelled request would otherwise leave the
	// key locked until it expires. The lock timeout bounds the provider call,
	// and a shutdown that runs out of time aborts it (Drain); the work after
	// the call (finishCtx) is detached from both, so an answer that arrived
	// is still recorded.
	detached := context.WithoutCancel(ctx)
	ctx, done := uc.core.running.start(detached, scope, uc.core.lockTimeout)
	defer done()

	rec, found, err := uc.core.keys.LookupKey(ctx, scope)
	if err != nil {
		return CommandResult{}, err
	}
	if found && !takeable(rec, hash) {
		return answerExisting(rec, hash)
	}

	k := KeyClaim{Scope: scope, CommandHash: hash, Token: uuid.New(), LockFor: uc.core.lockTimeout}
	claimedAt := time.Now()
	claimCtx, span := uc.startPhase(ctx, "claim", cmd)
	claimed, err := uc.claim(claimCtx, cmd, k)
	endPhase(span, err)
	var held *keyHeldError
	switch {
	case errors.As(err, &held):
		return answerExisting(held.rec, hash)
	case errors.Is(err, ErrReserveContended):
		return CommandResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	case err != nil:
		return CommandResult{}, err
	case claimed.Response != nil:
		return CommandResult{Response: *claimed.Response}, nil
	}

	decision, callErr := uc.steps.Call(ctx, claimed.Reservation)

	finishCtx, finishCancel := context.WithTimeout(detached, finishTimeout)
	defer finishCancel()
	settlement := settlementOf(decision)
	if callErr != nil {
		settleCtx, span := uc.startPhase(finishCtx, "settle failed call", cmd)
		settlement, err = uc.settleFailedCall(settleCtx, k, claimed, claimedAt, callErr)
		endPhase(span, err)
		if err != nil {
			return CommandResult{}, err
		}
	}
	recordCtx, span := uc.startPhase(finishCtx, "record", cmd)
	resp, err := uc.steps.Record(recordCtx, k, claimed.Reservation, settlement)
	endPhase(span, err)
	switch {
	case errors.Is(err, ErrLockLost):
		// The provider's own event recorded its decision for the key first
		// (ApplyProviderEvent, fenced by our token): that answer is this
		// request's too. Otherwise our lock expired and another request
		// took the key over; it will record the same provider decision, and
		// the client's retry replays it.
		if rec, found, err := uc.core.keys.LookupKey(finishCtx, k.Scope); err == nil && found &&
			rec.Status == RecordCompleted && rec.CommandHash == hash {
			return CommandResult{Response: rec.Response}, nil
		}
		return CommandResult{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	case err != nil:
		// The provider has answered, so "nothing happened" would be a lie.
		// The claim is still ours until its lock runs out; then a retry
		// takes it over and asks the provider, which answers the same.
		uc.core.logger.ErrorContext(ctx, "recording the provider's answer failed; the outcome is unknown to the client",
			append(uc.steps.LogAttrs(claimed.Reservation), "settlement", settlement, "err", err)...)
		return CommandResult{}, &OutcomeUnknownError{RetryAfter: lockRetryAfter(claimedAt.Add(uc.core.lockTimeout), time.Now()), Err: err}
	}
	return CommandResult{Response: resp}, nil
}

// claim is phase 1: on its own in one round trip for the usual answer, in
// a transaction for the rare ones.
func (uc *IdempotentCommand[C, T]) claim(ctx context.Context, cmd C, k KeyClaim) (Claimed[T], error) {
	claimed, err := uc.steps.ClaimAtOnce(ctx, cmd, k)
	if !errors.Is(err, ErrClaimNeedsTransaction) {
		return claimed, err
	}
	// A rare answer: the statement rolled back. It runs again in a
	// transaction, where that answer takes further statements.
	err = uc.core.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		claimed, err = uc.steps.Claim(ctx, r, cmd, k)
		if err != nil || !claimed.KeyHeld {
			return err
		}
		// Another request holds the key, or it holds another command. A new
		// statement sees the record as committed now.
		rec, found, err := r.Idempotency.Get(ctx, k.Scope)
		switch {
		case err != nil:
			return err
		case !found: // gone between the two statements (released, purged)
			return ErrReserveContended
		default:
			return &keyHeldError{rec: rec}
		}
	})
	return claimed, err
}

// settleFailedCall decides what a provider call that brought no decision
// leaves behind: a settlement for phase 3 to record, or an error for the
// client with the claim released or kept.
//
// A refusal speaks for this request only. For a reservation this very
// request made, no earlier request used its provider key, so a refusal is
// the whole truth: refused for good, it is recorded FAILED (a final
// answer); refused for now, the key and the reservation are given back for
// a retry. A resumed reservation was handed to the provider by an earlier
// attempt whose answer never arrived, and a provider refuses a retry before
// it looks at the key, so the provider's record under the key settles it:
// what it holds is recorded as any decision; nothing, after a refusal for
// good, is FAILED. Everything else is unknown, and an unknown outcome never
// deletes anything: the claim stays with its reservation, and the lock ends
// now so that the client's retry resumes at once.
func (uc *IdempotentCommand[C, T]) settleFailedCall(ctx context.Context, k KeyClaim, claimed Claimed[T], claimedAt time.Time, callErr error) (Settlement, error) {
	log := uc.core.logger.With(append(uc.steps.LogAttrs(claimed.Reservation), "err", callErr)...)
	refusedForGood := errors.Is(callErr, ErrProviderRefused)
	switch {
	case !errors.Is(callErr, ErrProviderNotCharged):
		// Unknown: below.
	case !claimed.Resumed && refusedForGood:
		log.WarnContext(ctx, "the provider refused for good; recording it FAILED")
		return SettledFailed, nil
	case !claimed.Resumed:
		log.WarnContext(ctx, "the provider did not act, for now; releasing the key for a retry")
		return "", uc.releaseForRetry(ctx, k, claimed.Reservation, claimedAt, callErr)
	default:
		decision, err := uc.steps.Lookup(ctx, claimed.Reservation)
		switch {
		case err == nil:
			log.InfoContext(ctx, "a resumed command was refused; the provider holds its decision under the key", "decision", decision)
			return settlementOf(decision), nil
		case errors.Is(err, ErrNoProviderCharge) && refusedForGood:
			log.WarnContext(ctx, "a resumed command was refused for good and the provider holds nothing under its key; recording it FAILED")
			return SettledFailed, nil
		case !errors.Is(err, ErrNoProviderCharge):
			log = log.With("lookup_err", err)
		}
	}

	log.WarnContext(ctx, "provider outcome unknown; the reservation stays PENDING for the retry or the completer",
		"resumed", claimed.Resumed)
	retryAfter := inProgressRetryAfter
	err := uc.core.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		return r.Idempotency.ExpireLock(ctx, k.Scope, k.Token)
	})
	if err != nil {
		// The lock runs out on its own; until then a retry is in progress.
		retryAfter = lockRetryAfter(claimedAt.Add(uc.core.lockTimeout), time.Now())
		if !errors.Is(err, ErrLockLost) {
			uc.core.logger.ErrorContext(ctx, "ending the lock early failed", "err", err)
		}
	}
	return "", &OutcomeUnknownError{RetryAfter: retryAfter, Err: callErr}
}

// releaseForRetry gives the key and the reservation back after the provider
// said it did not act, for now, on a reservation this request made:
// nothing can have happened for it, ever, so the retry may run the command
// afresh. Both go in one transaction, only if we still own the claim (a new
// owner needs the reservation as its recovery point), in the lock order
// every claim follows: the reservation's parents, then the key. The key is
// deleted before the reservation, which its recovery point references.
func (uc *IdempotentCommand[C, T]) releaseForRetry(ctx context.Context, k KeyClaim, t T, claimedAt time.Time, callErr error) error {
	err := uc.core.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		if err := uc.steps.LockParents(ctx, r, t); err != nil {
			return err
		}
		if err := r.Idempotency.Release(ctx, k.Scope, k.Token); err != nil {
			return err
		}
		return uc.steps.GiveBack(ctx, r, t)
	})
	switch {
	case err == nil:
		return fmt.Errorf("%w: %v", ErrProviderUnavailable, callErr)
	case errors.Is(err, ErrLockLost):
		// Our lock ran out during the call and another request took the
		// key over: it resumed the reservation and asks the provider
		// itself. Its answer is the key's, so "nothing was recorded" would
		// be false; the retry gets that answer.
		return &InProgressError{RetryAfter: inProgressRetryAfter}
	default:
		// The claim and its reservation stay until the lock runs out; the
		// retry then takes the key over and asks the provider again.
		uc.core.logger.ErrorContext(ctx, "releasing the key failed", "err", err)
		return &InProgressError{RetryAfter: lockRetryAfter(claimedAt.Add(uc.core.lockTimeout), time.Now())}
	}
}

// rebuilt checks a command the completer rebuilt from an abandoned
// record's recovery point (Resumable): only a command whose hash is the
// record's is the one the key was claimed for, and may run as its client's
// retry.
func (uc *IdempotentCommand[C, T]) rebuilt(rec IdempotencyRecord, cmd C) error {
	if _, hash := uc.steps.Key(cmd); hash != rec.CommandHash {
		return fmt.Errorf("the %s rebuilt from the record's recovery point does not match the record; left for the client's retry", uc.steps.Name())
	}
	return nil
}

// startPhase starts the span of one phase, named after the command.
func (uc *IdempotentCommand[C, T]) startPhase(ctx context.Context, phase string, cmd C) (context.Context, trace.Span) {
	return uc.core.tracer.Start(ctx, uc.steps.Name()+" "+phase, trace.WithAttributes(uc.steps.SpanAttributes(cmd)...))
}

// endPhase ends a phase's span, marking it failed if err is set.
func endPhase(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
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

// answerExisting answers a request whose key is held by a record it could
// not claim.
func answerExisting(rec IdempotencyRecord, hash string) (CommandResult, error) {
	switch {
	case rec.CommandHash != hash:
		return CommandResult{}, ErrKeyReused
	case rec.Status == RecordCompleted:
		return CommandResult{Response: rec.Response, Replayed: true}, nil
	default:
		return CommandResult{}, &InProgressError{RetryAfter: lockRetryAfter(rec.LockedUntil, time.Now())}
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
