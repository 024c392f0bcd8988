package app

import (
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
//     replica's replay cache instead (replay_cache.go). A command whose
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

// IdempotencyScope names one idempotency record: keys are per client.
type IdempotencyScope struct {
	// ClientID is the authenticated API client that sent the key.
	ClientID domain.ClientID
	// Key is the client's Idempotency-Key.
	Key string
}

// StoredResponse is the reply kept for a key (R-DIST-IDEM-3): the status
// and the exact body bytes, replayed as they are.
type StoredResponse struct {
	// StatusCode is the HTTP status the first answer had (for a saga
	// step's reply, the status an HTTP command with that answer gets).
	StatusCode int
	// Body is the first answer's body, byte for byte.
	Body []byte
	// Publish, when set, is the message that carries Body to its reader: a
	// saga step is answered on a topic. The statement that stores the
	// response appends it to the outbox too, so the answer and its message
	// commit together. Not stored: a replay rebuilds it (SagaReplies).
	Publish *Publication
}

// Publication is how a stored response travels as a message: through the
// outbox, to the replies topic, keyed so that one saga's replies stay in
// order.
type Publication struct {
	// EventID is the message's eventId (R-DIST-IDEM-1): the same on every
	// publication of the response, so its reader dedups a re-published one.
	EventID uuid.UUID
	// EventType is the message's type, such as PaymentStepCharged.v1.
	EventType string
	// Key is the message key: the saga id.
	Key string
}

// RecordStatus is where an idempotency record stands.
type RecordStatus string

const (
	// RecordInProgress: the key is claimed and its command has not ended;
	// the record carries a lock token and a lock expiry.
	RecordInProgress RecordStatus = "IN_PROGRESS"
	// RecordCompleted: the command's answer is stored and is replayed to
	// every request with the same key and command.
	RecordCompleted RecordStatus = "COMPLETED"
)

// CommandName names the command an idempotency record belongs to: the
// jobs act only on records of the commands they know.
type CommandName string

// IdempotencyRecord is a key's stored state.
type IdempotencyRecord struct {
	// Scope is the client and key the record belongs to.
	Scope IdempotencyScope
	// CommandHash is the hash of the command that claimed the key.
	CommandHash string
	// Command names the command. The jobs read it; phase 0's read leaves
	// it empty, since the hash already tells one command from another.
	Command CommandName
	// Status is IN_PROGRESS or COMPLETED.
	Status RecordStatus
	// Response is the stored answer, once COMPLETED.
	Response StoredResponse
	// RecoveryPoint is the id of the reservation the command's claim made
	// with it (a charge's payment, a refund's refund, a capture's or a
	// void's transition): which table it is of is the command's own
	// affair, and its Resume reads it. Nil if the claim reserved nothing,
	// so nothing can have reached the provider.
	RecoveryPoint *int64
	// LockToken is the current owner's token while IN_PROGRESS; every
	// write after the claim is fenced by it.
	LockToken uuid.UUID
	// LockedUntil is when the claim's lock runs out (database clock);
	// after it a retry may take the claim over.
	LockedUntil time.Time
	// CreatedAt starts the record's retention (R-DIST-IDEM-5).
	CreatedAt time.Time
}

// Transactor is the database the use cases run on: its repositories on the
// connection pool, where each statement commits on its own, or bound to
// one transaction. A phase that is one statement runs on the pool, in one
// round trip; a use case that needs several statements to commit together
// makes the boundary visible with Transact.
type Transactor interface {
	// AutoCommit returns the repositories on the pool, outside any
	// transaction.
	AutoCommit() Repos
	// Transact runs fn in one transaction: it commits when fn returns nil
	// and rolls back otherwise. The repositories handed to fn work inside
	// that transaction only. Errors are fn's, or the database's
	// (ErrStoreUnavailable when it cannot be reached).
	Transact(ctx context.Context, fn func(ctx context.Context, r Repos) error) error
}

// Repos are the repositories, each declared beside the use case that
// needs it.
type Repos struct {
	// Keys is the idempotency_record table (below).
	Keys KeyStore
	// Charges is the payment table (charge_payment.go).
	Charges ChargeStore
	// Refunds is the refund table (refund_payment.go).
	Refunds RefundStore
	// Orders is the order projection (orders.go).
	Orders OrderStore
	// ProcessedEvents is processed_event (apply_order_events.go).
	ProcessedEvents ProcessedEvents
	// ProviderReports is what a provider's event is about
	// (apply_provider_event.go).
	ProviderReports ProviderReports
	// Sagas is the saga_step table (saga.go).
	Sagas SagaStore
	// Outbox publishes a stored response again (saga.go).
	Outbox OutboxStore
	// Transitions is the payment_transition table (payment_transition.go).
	Transitions TransitionStore
}

// KeyStore is the idempotency_record table: the first layer.
type KeyStore interface {
	// Lookup reads a key's record without locking or writing anything.
	Lookup(ctx context.Context, scope IdempotencyScope) (rec IdempotencyRecord, found bool, err error)
	// Complete stores an answer that needs no provider call and ends the
	// claim, with its message when resp.Publish is set; ErrLockLost if
	// token no longer owns the record.
	Complete(ctx context.Context, scope IdempotencyScope, token uuid.UUID, resp StoredResponse) error
	// ExpireLock ends token's lock now but keeps the claim IN_PROGRESS with
	// its recovery point, so that the next retry takes it over at once;
	// ErrLockLost if token no longer owns the record.
	ExpireLock(ctx context.Context, scope IdempotencyScope, token uuid.UUID) error
	// Answer stores resp as the answer of a key that holds no record, with
	// no claim before it: an answer that needs no provider call and no
	// reservation (a saga step's failure once its order never came, a
	// tombstone's reply). It stores nothing and returns false when the key
	// holds a record.
	Answer(ctx context.Context, scope IdempotencyScope, command CommandName, hash string, resp StoredResponse) (bool, error)
}

// Command is a validated command that moves money.
type Command interface {
	// IdempotencyKey is the client and key the command came with.
	IdempotencyKey() IdempotencyScope
	// Hash is the command_hash of R-DIST-IDEM-3: the same for the same
	// command however it was written, different for any other. It covers
	// the command's operation.
	Hash() string
	// Endpoint is the operation the command came through (its Operation,
	// such as "POST /payments"): its transport answers it.
	Endpoint() string
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

// KeyClaim is one attempt's claim of a key: what phase 1 writes, and what
// fences every later write.
type KeyClaim struct {
	// Scope is the key to claim.
	Scope IdempotencyScope
	// CommandHash is the command's hash: a takeover requires the same one.
	CommandHash string
	// Token proves ownership when completing or releasing.
	Token uuid.UUID
	// LockFor is how long the claim blocks duplicates.
	LockFor time.Duration
	// answers renders the command's outcome as the key's answer: the
	// transport of the operation the command came through (Core.transport).
	answers Transport
}

// ClaimKind is what phase 1 decided.
type ClaimKind int

const (
	// ClaimFresh: the key is this attempt's, with a reservation it made
	// itself, so no earlier request used the reservation's provider key.
	ClaimFresh ClaimKind = iota + 1
	// ClaimResumed: the key was taken over with its reservation, which an
	// earlier attempt may have sent to the provider.
	ClaimResumed
	// ClaimAnswered: phase 1 stored the key's answer; nothing to call.
	ClaimAnswered
	// ClaimKeyHeld: another record holds the key; nothing of the statement
	// may stay.
	ClaimKeyHeld
)

// Claimed is phase 1's answer.
type Claimed[T any] struct {
	// Kind says which of the four it is.
	Kind ClaimKind
	// Reservation is what to call the provider for (fresh or resumed).
	Reservation T
	// Response is the answer phase 1 stored (answered).
	Response StoredResponse
	// Record is the record that holds the key (held), as the claim's
	// statement read it: phase 0's read. Nil when the claim lost the key
	// to a record its statement could not see, which is then read anew.
	Record *IdempotencyRecord
}

// CommandSteps are the parts of a command that are its own. C is the
// command; T is its reservation, the recovery point phase 1 writes with
// the claim and phases 2 and 3 act on (a PENDING payment for a charge).
//
// r is the repositories on the pool (Transactor.AutoCommit), where each
// statement commits on its own, or inside one transaction.
type CommandSteps[C Command, T any] interface {
	// Claim is phase 1: the reservation and the key's claim in one
	// statement. On the pool that statement commits only the usual answer
	// (the key claimed with a PENDING reservation) and returns
	// ErrClaimNeedsTransaction for any other, having committed nothing;
	// the core then runs Claim again in a transaction, which an error
	// rolls back.
	Claim(ctx context.Context, r Repos, cmd C, k KeyClaim) (Claimed[T], error)
	// Call is phase 2: the provider asked to carry the reservation out.
	Call(ctx context.Context, t T) (ProviderDecision, error)
	// Lookup asks the provider what it holds under the reservation's
	// provider key, without acting (ErrNoProviderCharge: nothing).
	Lookup(ctx context.Context, t T) (ProviderDecision, error)
	// Abilities are those of the provider the reservation is made at:
	// what the outcome model may conclude from its answers.
	Abilities(t T) ProviderAbilities
	// Record is phase 3: the reservation's final status, the response
	// stored for the key and the outcome event, in one statement fenced
	// by k.Token; ErrLockLost if the token no longer owns the key.
	Record(ctx context.Context, r Repos, k KeyClaim, t T, s Settlement) (StoredResponse, error)
	// Release gives the key and the reservation back, in one statement
	// fenced by k.Token, in the lock order of the claim (the reservation's
	// parents first, then the key): the provider did not act on a
	// reservation no earlier request used. ErrLockLost if the token no
	// longer owns the key.
	Release(ctx context.Context, r Repos, k KeyClaim, t T) error
	// Rebuild is the command a claim of scope with reservation t was made
	// for, had it come through operation: what the completer runs again,
	// and, by its hash, what tells which operation a record's command came
	// through. It reads only what t's row keeps.
	Rebuild(scope IdempotencyScope, t T, operation string) C
}

// CommandResult is the reply for the client.
type CommandResult struct {
	// Response is the answer: status and body bytes, as stored for the key.
	Response StoredResponse
	// Replayed is true when Response was stored by an earlier request.
	Replayed bool
}

// Transport is a way commands reach the core and their answers leave it:
// the HTTP API (internal/http's ResponseEncoder) or the saga's topics (the
// saga's replies, WithSagaReplies). It renders each command's outcome as
// the answer its key stores: the bytes every duplicate is answered with,
// and the message that carries them, if any. scope is the key answered,
// which names a saga's step; an HTTP response does not depend on it.
//
// The core picks the transport of each command by the operation it came
// through (Core.transport), so that no command knows any transport, and
// one core serves them all.
type Transport interface {
	ChargeResponses
	RefundResponses
	TransitionResponses
}

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

// KeyReadingSteps are CommandSteps whose Claim is phase 0's read too: its
// statement reads the key's record before anything else, writes and locks
// nothing when a record stands in the claim's way, and returns that record
// with ClaimKeyHeld (Claimed.Record). The core then reads no key before the
// claim, and a new key costs one round trip less. A command whose claim
// reads something else first leaves it out: a refund, a capture and a void
// check their payment before their claim, and a replay must be answered
// before that check, whatever the payment has become since.
type KeyReadingSteps interface {
	// ClaimReadsKey marks the steps.
	ClaimReadsKey()
}

// NewKeySteps are CommandSteps whose Claim claims only a key its own
// statement finds new, and otherwise claims nothing, stores nothing and
// returns an error for its caller, which then goes another way: a saga
// step's first try, whose statement inserts the step's saga_step row and
// claims only under a new row (SagaSteps.Charge). The core reads nothing
// before their claim, not even the replay cache, and returns a claim's
// error as it is, without reading the key again (refused): the other way
// checks what the key cannot tell (the step's row) before it reads the
// key, and a read here would cost a round trip for nothing.
type NewKeySteps interface {
	// ClaimsOnlyNewKeys marks the steps.
	ClaimsOnlyNewKeys()
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
	// key's completed answer (replay_cache.go), else from the database,
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

// storeAnswer completes the key with an answer that needs no provider
// call, in phase 1's transaction.
func storeAnswer[T any](ctx context.Context, r Repos, k KeyClaim, resp StoredResponse, err error) (Claimed[T], error) {
	if err != nil {
		return Claimed[T]{}, err
	}
	return Claimed[T]{Kind: ClaimAnswered, Response: resp}, r.Keys.Complete(ctx, k.Scope, k.Token, resp)
}
