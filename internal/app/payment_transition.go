package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// A payment transition moves an authorized payment on through the
// provider: a capture takes the held money, a void releases it. Both are
// one command on the core, PaymentTransition, told apart by what they ask
// the provider (TransitionCall) and what an approval makes of the payment
// (domain.TransitionKind). What they share comes first: the reservation
// is a PENDING payment_transition row, of which a payment has at most one
// PENDING or SUCCEEDED at a time, so a capture racing a void, or two
// captures, meet on the database and exactly one reaches the provider
// (decision 0030). Each one's own part follows, the capture's, then the
// void's: its name, its operation, its events, its provider call.

// TransitionCommand is a client's capture or void of one of its
// payments, with its idempotency key.
type TransitionCommand struct {
	// Scope is the client and the idempotency key the command came with.
	Scope IdempotencyScope
	// PaymentID is the authorized payment (the path's id).
	PaymentID domain.PaymentID
	// Amount and Currency are a capture's: what to take. Zero for a void.
	Amount decimal.Decimal
	// Currency is Amount's currency.
	Currency domain.Currency
	// Reference is a capture's externalCaptureId; empty for a void.
	Reference string
	// Operation names the endpoint.
	Operation string
}

// IdempotencyKey is the client and key the command came with.
func (c TransitionCommand) IdempotencyKey() IdempotencyScope { return c.Scope }

// Endpoint is the operation the command came through.
func (c TransitionCommand) Endpoint() string { return c.Operation }

// Hash is the command's command_hash; the operation tells a capture from
// a void.
func (c TransitionCommand) Hash() string {
	return canonicalHash("transition-v1", c.Operation, strconv.FormatInt(int64(c.PaymentID), 10),
		c.Amount.String(), string(c.Currency), c.Reference)
}

// Errors of a transition that are answered without storing anything: the
// payment's state may change, or the client may not see the payment.
var (
	// ErrPaymentNotAuthorized: the payment holds no money to move: it is
	// a one-step charge, or captured, voided, lapsed, or not decided yet
	// (409, not stored). A *PaymentStateError says which.
	ErrPaymentNotAuthorized = errors.New("the payment is not authorized")
	// ErrTransitionInProgress: another capture or void of the payment is
	// being made (409, not stored: if it is declined, this one may go).
	ErrTransitionInProgress = errors.New("another capture or void of the payment is in progress")
)

// PaymentStateError is ErrPaymentNotAuthorized with the payment's status.
type PaymentStateError struct {
	// Status is where the payment stands.
	Status domain.PaymentStatus
	// Manual is false for a one-step charge, which has nothing to capture.
	Manual bool
}

// Error says where the payment stands.
func (e *PaymentStateError) Error() string {
	if !e.Manual {
		return fmt.Sprintf("%v: it is a one-step charge (%s)", ErrPaymentNotAuthorized, e.Status)
	}
	return fmt.Sprintf("%v: it is %s", ErrPaymentNotAuthorized, e.Status)
}

// Unwrap makes the error ErrPaymentNotAuthorized to errors.Is.
func (e *PaymentStateError) Unwrap() error { return ErrPaymentNotAuthorized }

// TransitionStore is the payment_transition table and a transition's
// statements. Every one locks the payment first, then the transition,
// then the key, as a refund's do.
type TransitionStore interface {
	// Claim is phase 1 in one statement: the PENDING transition reserved
	// (only for an AUTHORIZED two-step payment with no other PENDING or
	// SUCCEEDED transition) and the key claimed, linked to it; or a
	// takeover, which keeps the record's own transition. On the pool it
	// commits only that, and returns ErrClaimNeedsTransaction otherwise.
	Claim(ctx context.Context, k KeyClaim, command CommandName, want domain.Transition, providerKey string) (TransitionClaimed, error)
	// Blocking says, in a statement of its own, what keeps a transition of
	// the payment from being reserved: the payment's status, and the
	// PENDING or SUCCEEDED transition that won, if any.
	Blocking(ctx context.Context, payment domain.PaymentID) (domain.PaymentStatus, *domain.Transition, error)
	// Record is phase 3 in one statement: the key completed, fenced by the
	// token; the transition's final status, and on an approval the
	// payment's (the payment status given, and a capture's amount); the
	// event appended. ErrLockLost if the token no longer owns the key.
	Record(ctx context.Context, rec TransitionRecord) error
	// Release deletes the claim and its PENDING transition, fenced by the
	// token; ErrLockLost if it no longer owns the key.
	Release(ctx context.Context, k KeyClaim, t domain.TransitionID) error
	// Get reads a transition; an error if there is none.
	Get(ctx context.Context, id domain.TransitionID) (domain.Transition, error)
	// ListAuthorized lists up to limit AUTHORIZED payments unchanged for
	// longer than olderThan, with no transition PENDING, oldest first.
	ListAuthorized(ctx context.Context, olderThan time.Duration, limit int) ([]domain.Payment, error)
	// Expire records the event's payment EXPIRED and appends the event, in
	// one statement, only if it is AUTHORIZED with no transition PENDING;
	// false when it is not.
	Expire(ctx context.Context, ev PaymentEvent) (bool, error)
	// RecordReceived is phase 3 of a transition the provider received
	// (AnswersReceived), in one statement: the key completed with resp,
	// fenced by k's token, and transition t left PENDING, awaiting the
	// provider; no event. ErrLockLost if the token no longer owns the key.
	RecordReceived(ctx context.Context, k KeyClaim, resp StoredResponse, t domain.TransitionID) error
	// SettleReceived records the provider's decision on the event's
	// transition while it awaits the provider, in one statement that
	// writes no key: its final status, on an approval the payment's
	// (paymentStatus, a capture's amount taken), the event. false when it
	// no longer awaits it (settled meanwhile); ErrNotReceived when it never
	// did (its claim records it).
	SettleReceived(ctx context.Context, paymentStatus domain.PaymentStatus, ev PaymentEvent) (bool, error)
	// ListReceived lists up to limit transitions awaiting their provider's
	// decision, received longer than olderThan ago, the oldest first.
	ListReceived(ctx context.Context, olderThan time.Duration, limit int) ([]ReceivedModification, error)
}

// TransitionClaimed is what a transition's phase 1 statement did.
type TransitionClaimed struct {
	// Claimed: the key is this attempt's now (new, or taken over).
	Claimed bool
	// Reserved: a new PENDING transition was inserted, the recovery point.
	Reserved bool
	// Transition is the reserved one or, after a takeover, the recovery
	// point's; nil when neither.
	Transition *domain.Transition
}

// TransitionRecord is what a transition's phase 3 writes.
type TransitionRecord struct {
	// Key is the claim whose token fences the write.
	Key KeyClaim
	// Response is the answer stored for the key.
	Response StoredResponse
	// PaymentStatus is the payment's status after an approval (SUCCEEDED
	// for a capture, VOIDED for a void); unused otherwise.
	PaymentStatus domain.PaymentStatus
	// Event carries the transition with its final status.
	Event PaymentEvent
}

// TransitionCall is what a transition asks the provider: its own part.
type TransitionCall interface {
	Provider
	// Call asks the provider to carry the transition of payment p out,
	// under its provider key.
	Call(ctx context.Context, p domain.Payment, t domain.Transition, providerKey string) (ProviderDecision, error)
	// Lookup asks what the provider holds of the transition t of payment
	// p, under its provider key.
	Lookup(ctx context.Context, p domain.Payment, t domain.Transition, providerKey string) (ProviderDecision, error)
}

// TransitionOutcomeKind says what a transition ended in.
type TransitionOutcomeKind int

const (
	// TransitionSucceeded: the provider captured (or voided).
	TransitionSucceeded TransitionOutcomeKind = iota + 1
	// TransitionDeclined: the provider declined it; the payment stays
	// AUTHORIZED.
	TransitionDeclined
	// TransitionFailed: the provider refused it for good (the hold lapsed,
	// say), or failed it after receiving it; the payment stays AUTHORIZED
	// until the provider says more.
	TransitionFailed
	// TransitionReceived: the provider received it and decides later
	// (AnswersReceived); the transition stays PENDING, and the payment
	// AUTHORIZED, held by it, until the provider's event settles it.
	TransitionReceived
)

// TransitionOutcome is a transition's answer before it is rendered.
type TransitionOutcome struct {
	// Kind is what it ended in.
	Kind TransitionOutcomeKind
	// Transition is the capture or void.
	Transition domain.Transition
	// Payment is the payment as the answer shows it.
	Payment domain.Payment
}

// TransitionResponses renders a transition's outcome into the answer
// stored for its key, scope (each Transport implements it).
type TransitionResponses interface {
	// EncodeTransitionOutcome returns the answer to the outcome.
	EncodeTransitionOutcome(scope IdempotencyScope, o TransitionOutcome) (StoredResponse, error)
}

// TransitionEvents name each kind's events by the transition's final
// status: PaymentCaptured.v1, CaptureDeclined.v1 ...
type TransitionEvents map[domain.PaymentStatus]string

// PaymentTransition runs the captures or the voids of authorized
// payments: one kind, told by its TransitionCall, its events and the
// payment status an approval gives (SUCCEEDED, VOIDED).
type PaymentTransition struct {
	db        Transactor
	kind      domain.TransitionKind
	operation string
	run       *IdempotentCommand[TransitionCommand, transitionReservation]
}

// NewPaymentTransition builds the command of kind on core, named name in
// its idempotency records, for requests to operation.
func NewPaymentTransition(core *Core, name CommandName, kind domain.TransitionKind, operation string, approved domain.PaymentStatus,
	call TransitionCall, events TransitionEvents) *PaymentTransition {
	steps := &transitionSteps{name: name, kind: kind, approved: approved, call: call, events: events}
	uc := &PaymentTransition{db: core.db, kind: kind, operation: operation, run: NewIdempotentCommand(core, name, steps)}
	core.resumes(name, uc)
	return uc
}

// Handle runs the transition. Errors are the core's, domain.ErrPaymentNotFound,
// a *PaymentStateError, ErrTransitionInProgress and domain.ErrCaptureMismatch.
func (uc *PaymentTransition) Handle(ctx context.Context, cmd TransitionCommand) (CommandResult, error) {
	return uc.run.Handle(ctx, cmd)
}

// Resume is the completer's retry of an abandoned transition, rebuilt
// from its PENDING row.
func (uc *PaymentTransition) Resume(ctx context.Context, rec IdempotencyRecord) error {
	if rec.RecoveryPoint == nil {
		return ErrNothingReserved
	}
	id := domain.TransitionID(*rec.RecoveryPoint)
	t, err := uc.db.AutoCommit().Transitions.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read %s %d: %w", uc.kind, id, err)
	}
	return uc.run.resume(ctx, rec, transitionReservation{transition: t}, uc.operation)
}

// transitionReservation is a transition's recovery point: the PENDING
// transition, with its payment.
type transitionReservation struct {
	transition domain.Transition
	payment    domain.Payment
}

// LogValue names the reservation in log lines.
func (t transitionReservation) LogValue() slog.Value {
	return slog.GroupValue(slog.String("kind", string(t.transition.Kind)),
		slog.Int64("transition_id", int64(t.transition.ID)), slog.Int64("payment_id", int64(t.payment.ID)))
}

// transitionSteps are a transition's parts of the core's protocol.
type transitionSteps struct {
	name     CommandName
	kind     domain.TransitionKind
	approved domain.PaymentStatus
	call     TransitionCall
	events   TransitionEvents
}

// Rebuild: the capture or void t.
func (*transitionSteps) Rebuild(scope IdempotencyScope, t transitionReservation, operation string) TransitionCommand {
	cmd := TransitionCommand{Scope: scope, PaymentID: t.transition.PaymentID, Reference: t.transition.Reference, Operation: operation}
	if t.transition.Kind == domain.TransitionCapture {
		cmd.Amount, cmd.Currency = t.transition.Amount.Amount(), t.transition.Amount.Currency()
	}
	return cmd
}

// Claim: phase 1, after the payment's read (a capture is checked against
// what the payment holds). What blocks a transition is read anew, in a
// statement of its own, only when the claim reserved nothing.
func (s *transitionSteps) Claim(ctx context.Context, r Repos, cmd TransitionCommand, k KeyClaim) (Claimed[transitionReservation], error) {
	p, err := clientPayment(ctx, r, cmd.Scope.ClientID, cmd.PaymentID)
	if err != nil {
		return Claimed[transitionReservation]{}, err
	}
	want, err := s.transitionOf(cmd, p)
	if err != nil {
		return Claimed[transitionReservation]{}, err
	}
	res, err := r.Transitions.Claim(ctx, k, s.name, want, want.ProviderIdempotencyKey(p))
	switch {
	case err != nil:
		return Claimed[transitionReservation]{}, err
	case !res.Claimed:
		return Claimed[transitionReservation]{Kind: ClaimKeyHeld}, nil
	case res.Reserved:
		return s.claimed(ClaimFresh, p, *res.Transition), nil
	case res.Transition != nil && !res.Transition.Status.Final():
		return s.claimed(ClaimResumed, p, *res.Transition), nil
	case res.Transition != nil:
		// A final transition under a claim in progress: only after a
		// manual repair. Store what it says, without a second event.
		return s.answer(ctx, r, k, p, *res.Transition)
	}
	status, winner, err := r.Transitions.Blocking(ctx, p.ID)
	switch {
	case err != nil:
		return Claimed[transitionReservation]{}, err
	case winner != nil && winner.Status == domain.PaymentPending:
		return Claimed[transitionReservation]{}, ErrTransitionInProgress
	case status != domain.PaymentAuthorized || winner != nil:
		return Claimed[transitionReservation]{}, &PaymentStateError{Status: status, Manual: p.Charge.Manual()}
	}
	// What stood in the way has gone since (a declined transition): the
	// retry finds the way free.
	return Claimed[transitionReservation]{}, ErrReserveContended
}

// transitionOf is the transition the command asks for.
func (s *transitionSteps) transitionOf(cmd TransitionCommand, p domain.Payment) (domain.Transition, error) {
	if !p.Charge.Manual() || p.Status != domain.PaymentAuthorized {
		return domain.Transition{}, &PaymentStateError{Status: p.Status, Manual: p.Charge.Manual()}
	}
	if s.kind == domain.TransitionVoid {
		return domain.NewVoid(p)
	}
	amount, err := domain.NewMoney(cmd.Amount, cmd.Currency)
	if err != nil {
		return domain.Transition{}, err
	}
	if err := s.call.Abilities().takesAmount(amount); err != nil {
		return domain.Transition{}, err
	}
	return domain.NewCapture(p, amount, cmd.Reference)
}

func (s *transitionSteps) claimed(kind ClaimKind, p domain.Payment, t domain.Transition) Claimed[transitionReservation] {
	return Claimed[transitionReservation]{Kind: kind, Reservation: transitionReservation{transition: t, payment: p}}
}

// answer stores the answer of a transition already decided.
func (s *transitionSteps) answer(ctx context.Context, r Repos, k KeyClaim, p domain.Payment, t domain.Transition) (Claimed[transitionReservation], error) {
	kind := TransitionSucceeded
	switch t.Status {
	case domain.PaymentDeclined:
		kind = TransitionDeclined
	case domain.PaymentFailed:
		kind = TransitionFailed
	}
	resp, err := k.answers.EncodeTransitionOutcome(k.Scope, TransitionOutcome{Kind: kind, Transition: t, Payment: p})
	return storeAnswer[transitionReservation](ctx, r, k, resp, err)
}

// Call: phase 2, the transition at the provider.
func (s *transitionSteps) Call(ctx context.Context, t transitionReservation) (ProviderDecision, error) {
	return s.call.Call(ctx, t.payment, t.transition, t.transition.ProviderIdempotencyKey(t.payment))
}

// Abilities: those of the provider the payment is held at.
func (s *transitionSteps) Abilities(transitionReservation) ProviderAbilities {
	return s.call.Abilities()
}

// Lookup: what the provider holds under the transition's key.
func (s *transitionSteps) Lookup(ctx context.Context, t transitionReservation) (ProviderDecision, error) {
	return s.call.Lookup(ctx, t.payment, t.transition, t.transition.ProviderIdempotencyKey(t.payment))
}

// transitionOutcomes are the answer each settlement records.
var transitionOutcomes = map[Settlement]TransitionOutcomeKind{
	SettledApproved: TransitionSucceeded,
	SettledDeclined: TransitionDeclined,
	SettledFailed:   TransitionFailed,
}

// Record: phase 3. An approval moves the payment on (SUCCEEDED with its
// captured amount, or VOIDED); a decline or a refusal leaves it
// AUTHORIZED. One event per transition outcome, keyed by the order.
func (s *transitionSteps) Record(ctx context.Context, r Repos, k KeyClaim, t transitionReservation, settled Settlement) (StoredResponse, error) {
	event, err := s.settledEvent(t, settled)
	if err != nil {
		return StoredResponse{}, err
	}
	resp, err := k.answers.EncodeTransitionOutcome(k.Scope, TransitionOutcome{Kind: transitionOutcomes[settled], Transition: *event.Transition, Payment: event.Payment})
	if err != nil {
		return StoredResponse{}, err
	}
	return resp, r.Transitions.Record(ctx, TransitionRecord{Key: k, Response: resp, PaymentStatus: s.approved, Event: event})
}

// settledEvent is the event of transition t settled: the transition with
// its final status, and the payment as the settlement leaves it.
func (s *transitionSteps) settledEvent(t transitionReservation, settled Settlement) (PaymentEvent, error) {
	tr, p := t.transition, t.payment
	tr.Status = settled.Status()
	if settled == SettledApproved {
		p.Status = s.approved
		if tr.Kind == domain.TransitionCapture {
			captured := tr.Amount
			p.Captured = &captured
		}
	}
	id, typ, err := newEvent(s.events, tr.Status, string(tr.Kind), int64(tr.ID))
	if err != nil {
		return PaymentEvent{}, err
	}
	return PaymentEvent{ID: id, Type: typ, Payment: p, Transition: &tr, OccurredAt: time.Now().UTC()}, nil
}

// RecordReceived: the provider received the capture or void. The key's
// answer is the PENDING transition (202), and the payment stays
// AUTHORIZED, held by it, until its event settles it. A transport whose
// answer says the outcome (a saga compensation's reply) has none to give
// yet: it answers ErrAnswerAwaitsSettlement, and the key waits for the
// settlement.
func (s *transitionSteps) RecordReceived(ctx context.Context, r Repos, k KeyClaim, t transitionReservation) (StoredResponse, error) {
	resp, err := k.answers.EncodeTransitionOutcome(k.Scope, TransitionOutcome{Kind: TransitionReceived, Transition: t.transition, Payment: t.payment})
	if err != nil {
		return StoredResponse{}, err
	}
	return resp, r.Transitions.RecordReceived(ctx, k, resp, t.transition.ID)
}

// SettleReceived: the provider decided a received capture or void, whose
// key is answered already: its final status, the payment moved on an
// approval, its event.
func (s *transitionSteps) SettleReceived(ctx context.Context, r Repos, t transitionReservation, settled Settlement) (bool, error) {
	event, err := s.settledEvent(t, settled)
	if err != nil {
		return false, err
	}
	return r.Transitions.SettleReceived(ctx, s.approved, event)
}

// Reported finds the capture or void a provider's event names by its
// provider key, in r's transaction.
func (s *transitionSteps) Reported(ctx context.Context, r Repos, ev ProviderEvent) (Report[transitionReservation], bool, error) {
	rep, found, err := r.ProviderReports.Transition(ctx, ev.ProviderKey)
	if err != nil || !found || rep.Transition.Kind != s.kind {
		return Report[transitionReservation]{}, false, err
	}
	amount := rep.Transition.Amount
	if s.kind == domain.TransitionVoid {
		amount = rep.Payment.Charge.Amount // a void releases what was held
	}
	return Report[transitionReservation]{Reservation: transitionReservation{transition: rep.Transition, payment: rep.Payment},
		Status: rep.Transition.Status, Amount: amount, Claim: rep.Claim}, true, nil
}

// Release: the claim and the PENDING transition go, since the provider did
// not act on it.
func (s *transitionSteps) Release(ctx context.Context, r Repos, k KeyClaim, t transitionReservation) error {
	return r.Transitions.Release(ctx, k, t.transition.ID)
}

// CommandCapture names a capture's idempotency records.
const CommandCapture CommandName = "capture"

// OperationCapturePayment is the Operation of a capture made through POST
// /payments/{id}/captures.
const OperationCapturePayment = "POST /payments/{id}/captures"

// Capture events, by the capture's final status.
const (
	// EventPaymentCaptured announces a payment whose held money was taken.
	EventPaymentCaptured = "PaymentCaptured.v1"
	// EventCaptureDeclined announces a capture the provider declined.
	EventCaptureDeclined = "CaptureDeclined.v1"
	// EventCaptureFailed announces a capture the provider refused for good.
	EventCaptureFailed = "CaptureFailed.v1"
)

// NewCapturePayment is the capture of authorized payments: a transition
// on the core (above) that asks the provider to take what it holds, and
// makes the payment SUCCEEDED with its captured amount. One capture per
// authorization; a partial capture releases the rest.
func NewCapturePayment(core *Core, provider CaptureProvider) *PaymentTransition {
	return NewPaymentTransition(core, CommandCapture, domain.TransitionCapture, OperationCapturePayment, domain.PaymentSucceeded,
		captureCall{provider}, TransitionEvents{
			domain.PaymentSucceeded: EventPaymentCaptured,
			domain.PaymentDeclined:  EventCaptureDeclined,
			domain.PaymentFailed:    EventCaptureFailed,
		})
}

// captureCall asks the provider for a capture.
type captureCall struct{ provider CaptureProvider }

func (c captureCall) Call(ctx context.Context, p domain.Payment, t domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.Capture(ctx, providerCapture(p, t, key))
}

// providerCapture is capture t of payment p as the provider is asked for
// it, under key.
func providerCapture(p domain.Payment, t domain.Transition, key string) ProviderCapture {
	return ProviderCapture{IdempotencyKey: key, AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt,
		Amount: t.Amount, Reference: t.Reference}
}

func (c captureCall) Abilities() ProviderAbilities { return c.provider.Abilities() }

func (c captureCall) Lookup(ctx context.Context, p domain.Payment, t domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.LookupCapture(ctx, providerCapture(p, t, key))
}

// ProviderCapture is a capture as the provider is asked for it: take
// Amount of the money held by an authorization.
type ProviderCapture struct {
	// IdempotencyKey is the capture's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under: how the provider knows the hold.
	AuthorizationKey string
	// AuthorizationReservedAt is when the authorized payment was reserved:
	// no request for it left before, so a provider that lists its records
	// over a window of time finds the hold from there.
	AuthorizationReservedAt time.Time
	// Amount is what to take, at most what is held, in its currency.
	Amount domain.Money
	// Reference is the client's id of the capture at the provider.
	Reference string
}

// CaptureProvider takes money an authorization holds. Its answers are a
// decision or one of the errors of outcome.go; a capture the provider can
// never make (the hold lapsed, was voided or captured already, an amount
// above it) is refused for good (ErrProviderRefused).
type CaptureProvider interface {
	Provider
	// Capture asks the provider to capture req under req.IdempotencyKey.
	Capture(ctx context.Context, req ProviderCapture) (ProviderDecision, error)
	// LookupCapture asks, without capturing, what the provider holds of
	// req (ErrNoProviderCharge: nothing found; any other error: it cannot
	// be known now).
	LookupCapture(ctx context.Context, req ProviderCapture) (ProviderDecision, error)
}

// CommandVoid names a void's idempotency records.
const CommandVoid CommandName = "void"

// OperationVoidPayment is the Operation of a void made through POST
// /payments/{id}/voids.
const OperationVoidPayment = "POST /payments/{id}/voids"

// Void events, by the void's final status.
const (
	// EventPaymentVoided announces a payment whose hold was released.
	EventPaymentVoided = "PaymentVoided.v1"
	// EventVoidDeclined announces a void the provider declined.
	EventVoidDeclined = "VoidDeclined.v1"
	// EventVoidFailed announces a void the provider refused for good.
	EventVoidFailed = "VoidFailed.v1"
)

// NewVoidPayment is the void of authorized payments: a transition on the
// core (above) that asks the provider to release the hold, and makes the
// payment VOIDED, its order free for a new payment.
func NewVoidPayment(core *Core, provider VoidProvider) *PaymentTransition {
	return NewPaymentTransition(core, CommandVoid, domain.TransitionVoid, OperationVoidPayment, domain.PaymentVoided,
		voidCall{provider}, TransitionEvents{
			domain.PaymentSucceeded: EventPaymentVoided,
			domain.PaymentDeclined:  EventVoidDeclined,
			domain.PaymentFailed:    EventVoidFailed,
		})
}

// voidCall asks the provider for a void.
type voidCall struct{ provider VoidProvider }

func (c voidCall) Call(ctx context.Context, p domain.Payment, _ domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.Void(ctx, providerVoid(p, key))
}

// providerVoid is the void of payment p as the provider is asked for it,
// under key.
func providerVoid(p domain.Payment, key string) ProviderVoid {
	return ProviderVoid{IdempotencyKey: key, AuthorizationKey: p.Charge.ProviderIdempotencyKey(), AuthorizationReservedAt: p.CreatedAt}
}

func (c voidCall) Abilities() ProviderAbilities { return c.provider.Abilities() }

func (c voidCall) Lookup(ctx context.Context, p domain.Payment, _ domain.Transition, key string) (ProviderDecision, error) {
	return c.provider.LookupVoid(ctx, providerVoid(p, key))
}

// ProviderVoid is a void as the provider is asked for it: release what an
// authorization holds.
type ProviderVoid struct {
	// IdempotencyKey is the void's own provider key.
	IdempotencyKey string
	// AuthorizationKey is the provider key the payment was authorized
	// under.
	AuthorizationKey string
	// AuthorizationReservedAt is as ProviderCapture's.
	AuthorizationReservedAt time.Time
}

// VoidProvider releases the money an authorization holds. A void the
// provider can never make (the hold was captured, or lapsed) is refused
// for good (ErrProviderRefused).
type VoidProvider interface {
	Provider
	// Void asks the provider to void req under req.IdempotencyKey.
	Void(ctx context.Context, req ProviderVoid) (ProviderDecision, error)
	// LookupVoid asks, without voiding, what the provider holds of req.
	LookupVoid(ctx context.Context, req ProviderVoid) (ProviderDecision, error)
}
