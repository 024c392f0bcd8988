package app

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// What the core works with: the key's record and answer, the ports it
// reaches the database through, the steps each command supplies, and the
// transports its answers leave by. The core that runs them is
// idempotent_command.go.

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
