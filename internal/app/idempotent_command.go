package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/domain"
)

// The core every command that moves money through a provider runs on: the
// charge, the refund, and whatever a team adds (docs/adding-a-command.md).
// Handle runs a command as a read and three atomic phases, Stripe-style,
// so that no provider call ever happens inside a database transaction:
//
//  0. read: the key's record, with no lock and no transaction. A replay, a
//     reused key and a duplicate meeting a live claim are answered from
//     it, and write nothing. A completed key's record may come from the
//     replica's replay cache instead (WithReplayCache). A command whose
//     claim statement reads the key first (KeyReadingSteps: the charge)
//     is read there, in phase 1's round trip, and writes nothing either.
//  1. claim: the key is claimed (insert-if-absent, never find-then-save)
//     together with the command's reservation, its recovery point, in one
//     statement that commits on its own. The rare answers (the key is
//     held, the reservation meets another row) roll it back and run again
//     in a transaction, where they take further statements.
//  2. call: the provider, with an idempotency key of its own derived from
//     the command's business identity, so calling again is safe.
//  3. record: one statement, fenced by the claim's lock token, sets the
//     reservation's final status, stores the response and appends the
//     outcome event to the outbox.
//
// Between 2 and 3 the outcome model (Settle, outcome.go) decides what a
// call's answer means. A crash between the phases leaves an IN_PROGRESS
// record whose lock expires; the retry with the key, or the completer,
// takes it over, finds the reservation and resumes from phase 2.

// Core is what the commands of one process share: the database, the
// transports that answer them, the lock timeout and the bounds the
// answers are timed by, the logger, the tracer, and the commands in flight
// that a shutdown drains.
type Core struct {
	db Transactor
	// answers is the transport of every operation no other transport
	// carries: the HTTP API's.
	answers Transport
	// transports are the other transports, by the operations they carry,
	// and operations those operations, in order.
	transports  map[string]Transport
	operations  []string
	lockTimeout time.Duration
	answerBound time.Duration
	logger      *slog.Logger
	tracer      trace.Tracer
	running     *runningCommands
	replays     *replayCache // nil: phase 0 always reads the database
	// resumable are the commands built on the core, by name (Resumable).
	resumable map[CommandName]Resumable
}

// NewCore builds the shared core. answers is the transport of every
// command that comes through an operation no other transport carries
// (WithTransport): the HTTP API's. lockTimeout is how long a claim holds a
// key before a retry may take it over; it must exceed the slowest provider
// call and the wait for earlier requests (ProviderAbilities.RequestBound).
func NewCore(db Transactor, answers Transport, lockTimeout time.Duration, logger *slog.Logger, opts ...CoreOption) *Core {
	c := &Core{db: db, answers: answers, transports: map[string]Transport{}, lockTimeout: lockTimeout, answerBound: lockTimeout,
		logger: logger, tracer: noop.NewTracerProvider().Tracer(""), running: newRunningCommands(), resumable: map[CommandName]Resumable{}}
	for _, opt := range opts {
		opt(c)
	}
	c.operations = slices.Sorted(maps.Keys(c.transports))
	return c
}

// transport is the transport of a command that came through operation.
func (c *Core) transport(operation string) Transport {
	if t, ok := c.transports[operation]; ok {
		return t
	}
	return c.answers
}

// Resumable are the commands built on the core, each under its name: the
// ones the completer drives to their end (NewCompleteAbandonedCharges). A
// command joins them as it is built (resumes), so that no list of the
// commands is kept beside them, and a command on the core cannot be one
// the completer does not know.
func (c *Core) Resumable() map[CommandName]Resumable { return maps.Clone(c.resumable) }

// resumes makes r the completer's way to finish name's abandoned records;
// each command's constructor calls it once.
func (c *Core) resumes(name CommandName, r Resumable) { c.resumable[name] = r }

// CoreOption configures the Core.
type CoreOption func(*Core)

// WithTracer makes each phase a span of its own ("charge claim", "charge
// settle", "charge record"); the provider call is its adapter's span.
func WithTracer(t trace.Tracer) CoreOption {
	return func(c *Core) { c.tracer = t }
}

// WithAnswerBound says how long after its claim a live attempt has
// answered: its provider call's bound (PROVIDER_TIMEOUT) and its waits.
// A duplicate that meets a claim younger than that is told to come back
// in a second; after it, when the lock runs out (retryAfterFor).
func WithAnswerBound(d time.Duration) CoreOption {
	return func(c *Core) { c.answerBound = d }
}

// WithTransport answers the commands that come through operations with
// t instead of the core's default transport.
func WithTransport(t Transport, operations ...string) CoreOption {
	return func(c *Core) {
		for _, op := range operations {
			c.transports[op] = t
		}
	}
}

// Phase 0 may read a key from this replica's memory instead of the
// database: a completed key's answer, kept by the replay cache, answers
// its replays and its reuse with another command (409) as the record
// itself would (docs/decisions/0031). What makes that safe:
//
//   - A COMPLETED record never changes. Every statement that writes a key
//     after its claim (the completion, the release, the lock's early end,
//     the claim's takeover) matches only IN_PROGRESS; a stored answer is
//     inserted only where no record is (KeyStore.Answer); a saga step's
//     replay re-publishes the stored bytes and writes nothing to the key.
//   - The purge alone deletes a COMPLETED record, and never before the
//     record's created_at plus the idempotency TTL, read on the clock of
//     whichever process runs it. An entry is kept until that time less a
//     clock margin, on this replica's clock, and at most the cache's
//     maximum age: it is gone before the record can be.
//   - Only COMPLETED records go in; an IN_PROGRESS one can still change.
//
// A miss reads the database as before.

// ReplayCache is this replica's memory of completed keys: bounded, with
// entries that end. The adapter is internal/replaycache.
type ReplayCache interface {
	// Get returns the record kept for scope, if one is kept and now is
	// before the time it was put until.
	Get(scope IdempotencyScope, now time.Time) (IdempotencyRecord, bool)
	// Put keeps rec, a COMPLETED record, for its scope until until.
	Put(rec IdempotencyRecord, until time.Time)
}

// ReplayCachePolicy is how long the replay cache keeps a completed key.
type ReplayCachePolicy struct {
	// Retention is the shortest time after its created_at that any
	// process's purge keeps a COMPLETED record: the least IDEMPOTENCY_TTL
	// a release accepts, so a replica whose TTL is longer (a rolling
	// deploy that changes it) never keeps an entry past the record.
	Retention time.Duration
	// ClockMargin is how far the clock of the process that runs the purge
	// may be ahead of this replica's: created_at is stamped by the
	// database, the purge's cutoff is its own clock less the TTL, and the
	// entry's end is judged by this replica's clock.
	ClockMargin time.Duration
	// MaxAge bounds an entry's life from the moment it is put, whatever
	// the record's age.
	MaxAge time.Duration
	// Now is the clock entries are judged by; time.Now when nil.
	Now func() time.Time
}

// replayCache is the cache with the policy it is kept by.
type replayCache struct {
	cache  ReplayCache
	policy ReplayCachePolicy
}

// WithReplayCache answers phase 0 from cache when it holds the key, and
// keeps there every COMPLETED record phase 0 reads from the database, by
// policy. Without it phase 0 always reads the database.
func WithReplayCache(cache ReplayCache, policy ReplayCachePolicy) CoreOption {
	return func(c *Core) {
		if policy.Now == nil {
			policy.Now = time.Now
		}
		c.replays = &replayCache{cache: cache, policy: policy}
	}
}

// cached is the key's completed record from the replay cache, if it holds
// one. The cache's bytes never leave it: what a caller does with its
// answer cannot change the next replay's.
func (c *Core) cached(scope IdempotencyScope) (IdempotencyRecord, bool) {
	if c.replays == nil {
		return IdempotencyRecord{}, false
	}
	rec, ok := c.replays.cache.Get(scope, c.replays.policy.Now())
	if ok {
		rec.Response.Body = bytes.Clone(rec.Response.Body)
	}
	return rec, ok
}

// remember keeps a record read from the database in the replay cache, if
// it is completed (replayCache.keep).
func (c *Core) remember(rec IdempotencyRecord) {
	if c.replays != nil {
		c.replays.keep(rec, c.replays.policy.Now())
	}
}

// keep puts a COMPLETED record read at now into the cache, until the
// earlier of its purge's earliest time less the clock margin and now plus
// the maximum age. A record without its created_at is not kept: its
// purge time is unknown.
func (r *replayCache) keep(rec IdempotencyRecord, now time.Time) {
	if rec.Status != RecordCompleted || rec.CreatedAt.IsZero() {
		return
	}
	until := rec.CreatedAt.Add(r.policy.Retention - r.policy.ClockMargin)
	if byAge := now.Add(r.policy.MaxAge); byAge.Before(until) {
		until = byAge
	}
	if !now.Before(until) {
		return
	}
	// Nor do the caller's bytes enter it.
	rec.Response = StoredResponse{StatusCode: rec.Response.StatusCode, Body: bytes.Clone(rec.Response.Body)}
	r.cache.Put(rec, until)
}

// runningCommands tracks the commands on the core in flight in this
// process, so that a shutdown can wait for them, and abort the ones that
// outlast it, before it closes the database pool under them.
//
// Aborting is safe at any point of a command, because it is exactly what a
// crash does at that point, minus the crash: the command's context is
// cancelled, so its next database or provider call fails and it writes
// nothing more. Phase 1 rolls back (nothing happened); after it, the key
// stays claimed with its PENDING reservation, the recovery point that the
// client's retry takes over once the lock expires, or that the completer
// finishes, asking the provider again with the same provider key.
type runningCommands struct {
	abort    context.Context // cancelled by abortAll
	abortAll context.CancelFunc

	mu      sync.Mutex
	next    uint64
	running map[uint64]IdempotencyScope
	changed chan struct{} // closed and replaced whenever a command ends
}

func newRunningCommands() *runningCommands {
	abort, abortAll := context.WithCancel(context.Background())
	return &runningCommands{abort: abort, abortAll: abortAll, running: map[uint64]IdempotencyScope{}, changed: make(chan struct{})}
}

// start registers a command for scope and returns its context: detached
// from the request (a client that goes away must not cut a claimed command
// short), bounded by the lock timeout, and cancelled by abortAll. done must
// be called when the command returns.
func (r *runningCommands) start(parent context.Context, scope IdempotencyScope, timeout time.Duration) (ctx context.Context, done func()) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	stop := context.AfterFunc(r.abort, cancel)
	r.mu.Lock()
	id := r.next
	r.next++
	r.running[id] = scope
	r.mu.Unlock()
	return ctx, func() {
		stop()
		cancel()
		r.mu.Lock()
		delete(r.running, id)
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// wait blocks until no command runs or ctx ends, and returns the scopes of
// the commands still running.
func (r *runningCommands) wait(ctx context.Context) []IdempotencyScope {
	for {
		r.mu.Lock()
		if len(r.running) == 0 {
			r.mu.Unlock()
			return nil
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			left := make([]IdempotencyScope, 0, len(r.running))
			for _, s := range r.running {
				left = append(left, s)
			}
			return left
		}
	}
}

// DrainResult is what Drain found.
type DrainResult struct {
	// Aborted are the keys of the commands that were still running when the
	// drain's time ran out, and were aborted: each is left claimed, for the
	// client's retry after its lock expires or for the completer.
	Aborted []IdempotencyScope
	// StillRunning are commands that had not returned even after the abort
	// and its grace; the database pool must not be closed under them.
	StillRunning []IdempotencyScope
}

// Drain waits for the commands running in this process until ctx ends. It
// then aborts those still running (see runningCommands), waits up to grace
// for them to return, and reports them. New commands started after the
// abort are cancelled at once. Call it once no new request can arrive.
func (c *Core) Drain(ctx context.Context, grace time.Duration) DrainResult {
	left := c.running.wait(ctx)
	if len(left) == 0 {
		return DrainResult{}
	}
	c.running.abortAll()
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return DrainResult{Aborted: left, StillRunning: c.running.wait(graceCtx)}
}

// IdempotentCommand runs one kind of command through the core.
type IdempotentCommand[C Command, T any] struct {
	core          *Core
	name          CommandName
	steps         CommandSteps[C, T]
	claimReadsKey bool // the steps are KeyReadingSteps
	onlyNewKeys   bool // the steps are NewKeySteps
}

// NewIdempotentCommand binds a command's steps to the core.
func NewIdempotentCommand[C Command, T any](core *Core, name CommandName, steps CommandSteps[C, T]) *IdempotentCommand[C, T] {
	_, readsKey := steps.(KeyReadingSteps)
	_, onlyNew := steps.(NewKeySteps)
	return &IdempotentCommand[C, T]{core: core, name: name, steps: steps, claimReadsKey: readsKey, onlyNewKeys: onlyNew}
}

// minRetryAfter is the least a client is ever told to wait, and what it is
// told while a live attempt may answer any moment: a replay read is cheap.
const minRetryAfter = time.Second

// finishTimeout bounds the database work after the provider call. It is
// detached from the lock's deadline on purpose: an answer that arrived
// just before the lock ran out is still recorded, and the lock token's
// fence turns the write away if another attempt took the key over.
const finishTimeout = 10 * time.Second

// Handle runs the command. Errors are ErrKeyReused, *InProgressError,
// *OutcomeUnknownError, ErrProviderUnavailable, ErrStoreUnavailable (only
// before the provider is called), the steps' own errors from phase 1 (such
// as domain.ErrOrderNotFound), or unexpected ones.
func (uc *IdempotentCommand[C, T]) Handle(ctx context.Context, cmd C) (CommandResult, error) {
	scope, hash := cmd.IdempotencyKey(), cmd.Hash()
	// Once the key is claimed the work runs to a recorded end even if the
	// client goes away: the lock timeout bounds it, a shutdown that runs
	// out of time aborts it (Drain), and what follows the call (finish) is
	// detached from both, so an answer that arrived is still recorded.
	detached := context.WithoutCancel(ctx)
	ctx, done := uc.core.running.start(detached, scope, uc.core.lockTimeout)
	defer done()

	// Phase 0: read, from this replica's replay cache when it holds the
	// key's completed answer (Core.cached), else from the database,
	// unless phase 1's statement reads the key itself (KeyReadingSteps);
	// nothing for steps that claim only new keys (NewKeySteps).
	read := !uc.onlyNewKeys
	if read {
		if rec, ok := uc.core.cached(scope); ok {
			return uc.answerFrom(rec, hash)
		}
	}
	if read && !uc.claimReadsKey {
		rec, found, err := uc.core.db.AutoCommit().Keys.Lookup(ctx, scope)
		if err != nil {
			return CommandResult{}, err
		}
		if found && !takeable(rec, hash) {
			uc.core.remember(rec)
			return uc.answerFrom(rec, hash)
		}
	}

	// Phase 1: claim.
	k := KeyClaim{Scope: scope, CommandHash: hash, Token: uuid.New(), LockFor: uc.core.lockTimeout,
		answers: uc.core.transport(cmd.Endpoint())}
	claimStarted := time.Now()
	claimed, err := uc.claim(ctx, cmd, k)
	switch {
	case errors.Is(err, errKeyHeld) && claimed.Record != nil:
		uc.core.remember(*claimed.Record)
		return uc.answerFrom(*claimed.Record, hash)
	case errors.Is(err, errKeyHeld):
		return uc.answerFromKey(ctx, k, false)
	case errors.Is(err, ErrReserveContended):
		return CommandResult{}, &InProgressError{RetryAfter: minRetryAfter}
	case err != nil && read:
		return uc.refused(ctx, k, err)
	case err != nil:
		return CommandResult{}, err
	case claimed.Kind == ClaimAnswered:
		return CommandResult{Response: claimed.Response}, nil
	}
	t := claimed.Reservation
	lockEnds := claimStarted.Add(uc.core.lockTimeout)
	// A provider that acts on a request only within a bound of its
	// sending: every attempt sends while its lock is live, and a takeover
	// comes only after the lock it takes over ended, so from the bound
	// after this claim on, no earlier attempt's request can still land.
	abilities := uc.steps.Abilities(t)
	earlierLanded := time.Now().Add(abilities.RequestBound)

	// Phase 2: call.
	decision, callErr := uc.steps.Call(ctx, t)

	// The outcome model decides what the answer means (outcome.go); a
	// refusal of a resumed reservation asks the provider's record, and
	// waits for requests that may still land, before it is final.
	finish, cancel := context.WithTimeout(detached, finishTimeout)
	defer cancel()
	settleCtx, span := uc.startPhase(ctx, "settle")
	answers := CallAnswers{Call: answerOfCall(decision, callErr, abilities), Resumed: claimed.Kind == ClaimResumed, Provider: abilities.Recovery()}
	for {
		verdict := Settle(answers)
		switch verdict.Action {
		case RecordSettlement:
			endPhase(span, nil)
			// Phase 3: record.
			return uc.record(finish, k, t, verdict.Settlement, lockEnds)
		case LookUpKey:
			answers.Lookup = AnswerOf(uc.steps.Lookup(settleCtx, t))
			answers.EarlierMayLand = time.Now().Before(earlierLanded)
		case WaitForEarlier:
			if !sleepUntil(settleCtx, earlierLanded) {
				answers.Lookup = AnswerUnknown // the lock ends first
				continue
			}
			answers.Lookup = AnswerNotAsked
		case ReleaseKey:
			res, err := uc.release(finish, k, t, callErr, lockEnds)
			endPhase(span, err)
			return res, err
		case RecordReceived:
			endPhase(span, nil)
			// Phase 3: the receipt (received_modifications.go).
			return uc.recordReceived(finish, settleCtx, k, t, lockEnds)
		default:
			uc.logFor(t).WarnContext(ctx, "provider outcome unknown; the reservation stays PENDING for the retry or the completer",
				"call", answers.Call, "lookup", answers.Lookup, "resumed", answers.Resumed, "err", callErr)
			res, err := uc.keepUnknown(finish, k, callErr, lockEnds)
			endPhase(span, err)
			return res, err
		}
	}
}

// errKeyHeld: phase 1 found the key held by another record, and rolled
// back whatever its statement reserved.
var errKeyHeld = errors.New("idempotency key held")

// claim is phase 1: on its own in one round trip for the usual answer, in
// a transaction for the rare ones.
func (uc *IdempotentCommand[C, T]) claim(ctx context.Context, cmd C, k KeyClaim) (claimed Claimed[T], err error) {
	ctx, span := uc.startPhase(ctx, "claim")
	defer func() { endPhase(span, err) }()
	claimed, err = uc.steps.Claim(ctx, uc.core.db.AutoCommit(), cmd, k)
	if !errors.Is(err, ErrClaimNeedsTransaction) {
		if err == nil && claimed.Kind == ClaimKeyHeld {
			err = errKeyHeld
		}
		return claimed, err
	}
	// A rare answer: the statement rolled back. It runs again in a
	// transaction, where that answer takes further statements.
	err = uc.core.db.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		claimed, err = uc.steps.Claim(ctx, r, cmd, k)
		if err == nil && claimed.Kind == ClaimKeyHeld {
			return errKeyHeld // rolls back whatever the statement reserved
		}
		return err
	})
	return claimed, err
}

// record is phase 3, and the answer it leaves.
func (uc *IdempotentCommand[C, T]) record(ctx context.Context, k KeyClaim, t T, s Settlement, lockEnds time.Time) (_ CommandResult, err error) {
	ctx, span := uc.startPhase(ctx, "record")
	defer func() { endPhase(span, err) }()
	resp, err := uc.steps.Record(ctx, uc.core.db.AutoCommit(), k, t, s)
	switch {
	case errors.Is(err, ErrLockLost):
		return uc.answerFromKey(ctx, k, true)
	case err != nil:
		// The provider has answered, so "nothing happened" would be a lie.
		// The claim is ours until its lock runs out; then a retry takes it
		// over and asks the provider, which answers the same.
		uc.logFor(t).ErrorContext(ctx, "recording the provider's answer failed; the outcome is unknown to the client",
			"settlement", s, "err", err)
		return CommandResult{}, &OutcomeUnknownError{RetryAfter: untilLockEnds(lockEnds), Err: err}
	}
	return CommandResult{Response: resp}, nil
}

// release gives the key and the reservation back after the provider said
// it did not act, for now, on a reservation this attempt made: nothing can
// have happened for it, so the retry may run the command afresh.
func (uc *IdempotentCommand[C, T]) release(ctx context.Context, k KeyClaim, t T, callErr error, lockEnds time.Time) (CommandResult, error) {
	err := uc.steps.Release(ctx, uc.core.db.AutoCommit(), k, t)
	switch {
	case err == nil:
		uc.logFor(t).WarnContext(ctx, "the provider did not act, for now; the key is released for a retry", "err", callErr)
		return CommandResult{}, fmt.Errorf("%w: %w", ErrProviderUnavailable, callErr)
	case errors.Is(err, ErrLockLost):
		// The lock ran out during the call and another attempt took the
		// key over with the reservation: its answer is the key's, so
		// "nothing was recorded" would be false.
		return uc.answerFromKey(ctx, k, true)
	default:
		// The claim and its reservation stay until the lock runs out; the
		// retry then takes the key over and asks the provider again.
		uc.logFor(t).ErrorContext(ctx, "releasing the key failed", "err", err)
		return CommandResult{}, &InProgressError{RetryAfter: untilLockEnds(lockEnds)}
	}
}

// keepUnknown keeps the claim and its reservation after an answer that
// says nothing for sure, and ends the lock now, so the client's retry
// resumes at once. An unknown outcome never deletes anything.
func (uc *IdempotentCommand[C, T]) keepUnknown(ctx context.Context, k KeyClaim, callErr error, lockEnds time.Time) (CommandResult, error) {
	err := uc.core.db.AutoCommit().Keys.ExpireLock(ctx, k.Scope, k.Token)
	switch {
	case err == nil:
		return CommandResult{}, &OutcomeUnknownError{RetryAfter: minRetryAfter, Err: callErr}
	case errors.Is(err, ErrLockLost):
		// The provider's event recorded the decision under this claim
		// (ApplyProviderEvent), or another attempt took the key over:
		// the key says which.
		return uc.answerFromKey(ctx, k, true)
	default:
		uc.core.logger.ErrorContext(ctx, "ending the lock early failed; it runs out by itself", "err", err)
		return CommandResult{}, &OutcomeUnknownError{RetryAfter: untilLockEnds(lockEnds), Err: callErr}
	}
}

// answerFromKey answers an attempt that lost its claim after the call
// (claimed) or never got it, from the key as it stands now. A key
// completed for this command is the answer: after a lost claim, this
// attempt's own (a provider's event recorded the decision under its claim,
// or the attempt that took the key over recorded the provider's answer);
// otherwise a replay. A key held by a live claim is in progress.
func (uc *IdempotentCommand[C, T]) answerFromKey(ctx context.Context, k KeyClaim, claimed bool) (CommandResult, error) {
	rec, found, err := uc.core.db.AutoCommit().Keys.Lookup(ctx, k.Scope)
	switch {
	case err != nil || !found:
		// Gone meanwhile (released, purged): the retry runs afresh, and the
		// second layer answers it if the money moved.
		return CommandResult{}, &InProgressError{RetryAfter: minRetryAfter}
	case claimed && rec.CommandHash == k.CommandHash && rec.Status == RecordCompleted:
		return CommandResult{Response: rec.Response}, nil
	}
	return uc.answerFrom(rec, k.CommandHash)
}

// refused answers a claim that was refused: most often from the state of
// what the command acts on (the payment is captured, the refund no longer
// fits, the order is paid). That state may be this very key's doing: a
// duplicate that read the key before the first request claimed it, and
// the payment after the first request recorded its capture, would be told
// "not authorized" while the key holds the capture. So the key is read
// again, and a record in it answers as phase 0 would have: the stored
// answer, in progress, or a reused key. Reading it after the refusal is
// enough: a command's claim commits before any state it changes, so a
// refusal that saw the change finds the claim. A free key leaves the
// refusal standing, with nothing stored. The database's being unreachable
// is no refusal: it is answered as it is. (NewKeySteps' callers take a
// refusal to a way that reads the key, so they skip this.)
func (uc *IdempotentCommand[C, T]) refused(ctx context.Context, k KeyClaim, refusal error) (CommandResult, error) {
	var inProgress *InProgressError
	if errors.Is(refusal, ErrStoreUnavailable) || errors.As(refusal, &inProgress) {
		return CommandResult{}, refusal
	}
	rec, found, err := uc.core.db.AutoCommit().Keys.Lookup(ctx, k.Scope)
	switch {
	case err != nil:
		return CommandResult{}, err
	case !found:
		return CommandResult{}, refusal
	}
	uc.core.remember(rec)
	return uc.answerFrom(rec, k.CommandHash)
}

// answerFrom answers from a record the attempt could not claim.
func (uc *IdempotentCommand[C, T]) answerFrom(rec IdempotencyRecord, hash string) (CommandResult, error) {
	switch {
	case rec.CommandHash != hash:
		return CommandResult{}, ErrKeyReused
	case rec.Status == RecordCompleted:
		return CommandResult{Response: rec.Response, Replayed: true}, nil
	default:
		return CommandResult{}, &InProgressError{RetryAfter: uc.core.retryAfterFor(rec.LockedUntil, time.Now())}
	}
}

// retryAfterFor is what a duplicate that meets a live claim is told to
// wait. While the claim's owner may still answer (within the answer bound
// of its claim), a second: it may finish any moment, and a replay read is
// cheap. After that the owner has answered or gone, and the retry can only
// take the claim over once the lock runs out: what the lock has left. The
// claim's start is its lock's end less this replica's lock timeout;
// locked_until is set by the database clock, and a skew between it and
// ours makes a retry meet the lock once more and be told the rest.
func (c *Core) retryAfterFor(lockedUntil, now time.Time) time.Duration {
	if now.Before(lockedUntil.Add(-c.lockTimeout).Add(c.answerBound)) {
		return minRetryAfter
	}
	return max(lockedUntil.Sub(now), minRetryAfter)
}

// untilLockEnds is what is left of this attempt's own lock: the earliest a
// retry can take the claim over when the lock could not be ended early.
func untilLockEnds(lockEnds time.Time) time.Duration {
	return max(time.Until(lockEnds), minRetryAfter)
}

// takeable reports whether a claim could take the record over: an
// IN_PROGRESS claim of the same command whose lock has run out, by this
// process's clock. The claim statement decides by the database's; this
// only spares it the records it would certainly refuse.
func takeable(rec IdempotencyRecord, hash string) bool {
	return rec.CommandHash == hash && rec.Status == RecordInProgress && !rec.LockedUntil.After(time.Now())
}

// sleepUntil waits until t, and reports false without waiting when ctx
// ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	wait := time.Until(t)
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(t) {
		return false
	}
	if wait <= 0 {
		return true
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// resume runs the command an abandoned record was claimed for, rebuilt
// from its recovery point t, as its client's retry: the command as it came
// through operation (its endpoint's), or through another transport's, as
// the record's hash says. Only a command whose hash is the record's is the
// one the key was claimed for; any other is left for the client's own
// retry rather than guessed at.
func (uc *IdempotentCommand[C, T]) resume(ctx context.Context, rec IdempotencyRecord, t T, operation string) error {
	cmd, ok := uc.claimedVia(rec, t)
	if !ok {
		cmd = uc.steps.Rebuild(rec.Scope, t, operation)
	}
	if cmd.Hash() != rec.CommandHash {
		return fmt.Errorf("the %s rebuilt from key %q's recovery point does not match the record; left for the client's retry", uc.name, rec.Scope.Key)
	}
	_, err := uc.Handle(ctx, cmd)
	return err
}

// claimedVia is the command rec's key was claimed for with reservation t,
// if it came through an operation of a transport other than the default:
// the command rebuilt under each such operation whose hash is the
// record's (the operation is part of the hash).
func (uc *IdempotentCommand[C, T]) claimedVia(rec IdempotencyRecord, t T) (C, bool) {
	for _, op := range uc.core.operations {
		if cmd := uc.steps.Rebuild(rec.Scope, t, op); cmd.Hash() == rec.CommandHash {
			return cmd, true
		}
	}
	var none C
	return none, false
}

// answersOf is the transport of rec's key, claimed with reservation t: the
// one of the operation its command came through, told by its hash, and
// the default one when no other's operation gives that hash.
func (uc *IdempotentCommand[C, T]) answersOf(rec IdempotencyRecord, t T) Transport {
	if cmd, ok := uc.claimedVia(rec, t); ok {
		return uc.core.transport(cmd.Endpoint())
	}
	return uc.core.answers
}

// startPhase starts the span of one phase, named after the command.
func (uc *IdempotentCommand[C, T]) startPhase(ctx context.Context, phase string) (context.Context, trace.Span) {
	return uc.core.tracer.Start(ctx, string(uc.name)+" "+phase, trace.WithAttributes(attribute.String("idempotency.command", string(uc.name))))
}

// endPhase ends a phase's span, marking it failed if err is set.
func endPhase(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// logFor is the core's logger with the command and its reservation.
func (uc *IdempotentCommand[C, T]) logFor(t T) *slog.Logger {
	return uc.core.logger.With("command", uc.name, "reservation", t)
}

// What the commands' steps share: the answer stored without a call, the
// command's hash, the payment a command on a payment reads, the event of
// a final status.

// storeAnswer completes the key with an answer that needs no provider
// call, in phase 1's transaction.
func storeAnswer[T any](ctx context.Context, r Repos, k KeyClaim, resp StoredResponse, err error) (Claimed[T], error) {
	if err != nil {
		return Claimed[T]{}, err
	}
	return Claimed[T]{Kind: ClaimAnswered, Response: resp}, r.Keys.Complete(ctx, k.Scope, k.Token, resp)
}

// canonicalHash is SHA-256 over fields, each length-prefixed, so that no
// two different lists of fields give the same form. Every command hashes
// through it; each starts its fields with a version tag of its own.
func canonicalHash(fields ...string) string {
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// clientPayment reads payment id if it is client's, and otherwise answers
// domain.ErrPaymentNotFound, so a client cannot probe for other clients'
// payments.
func clientPayment(ctx context.Context, r Repos, client domain.ClientID, id domain.PaymentID) (domain.Payment, error) {
	p, err := r.Charges.Get(ctx, id)
	if err == nil && p.ClientID != client {
		err = domain.ErrPaymentNotFound
	}
	return p, err
}

// newEvent is the id and the type of the event that announces a final
// status, one of types; an error for a status that is not final.
func newEvent(types map[domain.PaymentStatus]string, status domain.PaymentStatus, what string, id int64) (uuid.UUID, string, error) {
	typ, ok := types[status]
	if !ok {
		return uuid.Nil, "", fmt.Errorf("%s %d is %s: only a final status is an event", what, id, status)
	}
	eventID, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, "", fmt.Errorf("event id: %w", err)
	}
	return eventID, typ, nil
}
