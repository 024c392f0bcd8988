package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// OperationRefundPayment is the Operation of a refund made through POST
// /payments/{id}/refunds; the completer uses the very string the HTTP
// adapter uses.
const OperationRefundPayment = "POST /payments/{id}/refunds"

// CommandRefund names a refund's idempotency records; the claim statement
// writes it as the literal 'refund' (internal/repository).
const CommandRefund CommandName = "refund"

// Errors of a refund that are answered without storing anything: each
// depends on state that can change, or on a payment the client may not see.
var (
	// ErrPaymentNotRefundable: the client's payment is not SUCCEEDED (409,
	// not stored: a PENDING payment may still succeed).
	ErrPaymentNotRefundable = errors.New("payment is not refundable")
	// ErrRefundExceedsPayment: the refund would take the payment's refund
	// total beyond its amount (409, not stored: a PENDING refund that
	// counts now may still be declined, and then the same refund fits).
	ErrRefundExceedsPayment = errors.New("refund exceeds what the payment has left")
)

// RefundCommand is a client's request to refund part or all of one of its
// payments, with its idempotency key.
type RefundCommand struct {
	// Scope is the client and the idempotency key the command came with.
	Scope IdempotencyScope
	// PaymentID is the payment to refund (the path's id).
	PaymentID domain.PaymentID
	// Amount is how much to give back, in the payment's currency; the
	// request carries no currency of its own.
	Amount decimal.Decimal
	// ExternalRefundID is the client's id for this refund: the second layer.
	ExternalRefundID domain.ExternalRefundID
	// Operation names the endpoint, OperationRefundPayment.
	Operation string
}

// IdempotencyKey is the client and key the refund came with.
func (c RefundCommand) IdempotencyKey() IdempotencyScope { return c.Scope }

// Endpoint is the operation the refund came through.
func (c RefundCommand) Endpoint() string { return c.Operation }

// Hash is the refund's command_hash, over the same canonical form as a
// charge's, with a version tag of its own.
func (c RefundCommand) Hash() string {
	return canonicalHash(
		"refund-v1",
		c.Operation,
		strconv.FormatInt(int64(c.PaymentID), 10),
		c.Amount.String(), // canonical: no trailing zeros
		string(c.ExternalRefundID),
	)
}

// RefundStore is the refund table and a refund's statements. Every
// statement that writes a refund locks its payment first, then the refund,
// then the key (docs/adding-a-command.md, "Lock order").
type RefundStore interface {
	// Claim is phase 1 in one statement: a PENDING refund reserved against
	// its payment's refund total (only for a refundable payment with room
	// for it) and the key claimed, linked to it; or a takeover, which keeps
	// the record's own refund. On the pool it commits only a claimed key
	// with a PENDING refund, and returns ErrClaimNeedsTransaction otherwise.
	Claim(ctx context.Context, k KeyClaim, r domain.Refund) (RefundClaimed, error)
	// Reserve is phase 1's rare path: it reserves the refund (and links k's
	// record to it) or says what stands in the way.
	Reserve(ctx context.Context, k KeyClaim, r domain.Refund) (RefundReservation, error)
	// Record is phase 3 in one statement: the key completed, fenced by the
	// token; the refund's final status (DECLINED and FAILED give the
	// amount back); the event appended. ErrLockLost if the token no longer
	// owns the key.
	Record(ctx context.Context, rec RefundRecord) error
	// Release deletes the claim and its PENDING refund, giving the amount
	// back, fenced by the token; ErrLockLost if it no longer owns the key.
	Release(ctx context.Context, k KeyClaim, refund domain.RefundID) error
	// Get reads a refund; an error if there is none.
	Get(ctx context.Context, id domain.RefundID) (domain.Refund, error)
	// List lists a payment's refunds, oldest first.
	List(ctx context.Context, payment domain.PaymentID) ([]domain.Refund, error)
	// RecordReceived is phase 3 of a refund the provider received
	// (AnswersReceived), in one statement: the key completed with resp,
	// fenced by k's token, and the refund left PENDING, awaiting the
	// provider, its amount still counted; no event. ErrLockLost if the
	// token no longer owns the key.
	RecordReceived(ctx context.Context, k KeyClaim, resp StoredResponse, refund domain.RefundID) error
	// SettleReceived records the provider's decision on the event's refund
	// while it awaits the provider, in one statement that writes no key:
	// its final status (DECLINED and FAILED give the amount back), the
	// event. false when it no longer awaits it (settled meanwhile);
	// ErrNotReceived when it never did (its claim records it).
	SettleReceived(ctx context.Context, ev RefundEvent) (bool, error)
	// ListReceived lists up to limit refunds awaiting their provider's
	// decision, received longer than olderThan ago, the oldest first.
	ListReceived(ctx context.Context, olderThan time.Duration, limit int) ([]ReceivedModification, error)
}

// RefundClaimed is what the refund's phase 1 statement did.
type RefundClaimed struct {
	// Claimed: the key is this attempt's now (new, or taken over).
	Claimed bool
	// Reserved: a new PENDING refund was inserted, the recovery point.
	Reserved bool
	// SagaID is the payment's order's saga, for the refund's event.
	SagaID uuid.NullUUID
	// Refund is the reserved refund or, after a takeover, the recovery
	// point's; nil when neither.
	Refund *domain.Refund
}

// RefundReservationKind says what Reserve did.
type RefundReservationKind int

const (
	// RefundReserved: a new PENDING refund was inserted and its amount
	// added to the payment's refund total.
	RefundReserved RefundReservationKind = iota + 1
	// RefundPaymentNotFound: no payment with the id belongs to the client.
	RefundPaymentNotFound
	// RefundPaymentNotRefundable: the payment is not SUCCEEDED, or is in
	// another currency or at another provider than the refund.
	RefundPaymentNotRefundable
	// RefundExternalRefundExists: a refund with the same provider and
	// external refund id is recorded (Refund is that one, whoever's it is).
	RefundExternalRefundExists
	// RefundOverTheAmount: the refund would take the payment's refund total
	// beyond the amount charged.
	RefundOverTheAmount
)

// String names the kind, for messages and test failures.
func (k RefundReservationKind) String() string {
	switch k {
	case RefundReserved:
		return "reserved"
	case RefundPaymentNotFound:
		return "payment not found"
	case RefundPaymentNotRefundable:
		return "payment not refundable"
	case RefundExternalRefundExists:
		return "external refund exists"
	case RefundOverTheAmount:
		return "over the amount"
	default:
		return fmt.Sprintf("RefundReservationKind(%d)", int(k))
	}
}

// RefundReservation is Reserve's answer.
type RefundReservation struct {
	// Kind is what happened.
	Kind RefundReservationKind
	// Refund is the new refund (RefundReserved) or the existing one
	// (RefundExternalRefundExists); zero otherwise.
	Refund domain.Refund
	// ClientID is Refund's client.
	ClientID domain.ClientID
	// RefundReserved is the payment's refund total after the statement,
	// when the client's payment was found.
	RefundReserved decimal.Decimal
}

// RefundRecord is what a refund's phase 3 writes.
type RefundRecord struct {
	// Key is the claim whose token fences the write.
	Key KeyClaim
	// Response is the answer stored for the key.
	Response StoredResponse
	// Event carries the refund with its final status.
	Event RefundEvent
}

// ProviderRefund is one refund request to a payment provider.
type ProviderRefund struct {
	// IdempotencyKey is the refund's own provider key
	// (domain.Refund.ProviderIdempotencyKey).
	IdempotencyKey string
	// ChargeKey is the provider key the refunded payment was charged under:
	// how the provider knows the charge (a two-step payment's capture's).
	ChargeKey string
	// PaymentKey is the provider key of the payment itself (its charge's
	// or its authorization's): how a provider that knows a payment by its
	// own id finds it (Stripe refunds a PaymentIntent, captured or not).
	PaymentKey string
	// PaymentReservedAt is when the payment was reserved, for a provider
	// that lists its records over a window of time.
	PaymentReservedAt time.Time
	// ReservedAt is when the refund was reserved: a provider that forgets
	// an idempotency key after a while (Stripe: 24 h) must not be sent the
	// refund again once it may have, or it may refund twice.
	ReservedAt time.Time
	// Refund is what to refund.
	Refund domain.Refund
}

// RefundProvider gives money back on the other side of a network. Its
// answers are ChargeProvider's, read for a refund (ErrProviderRefused
// among others for a refund beyond what the charge has left).
type RefundProvider interface {
	Provider
	// Refund asks the provider to refund req under req.IdempotencyKey.
	Refund(ctx context.Context, req ProviderRefund) (ProviderDecision, error)
	// LookupRefund asks, without refunding, what the provider holds of
	// req, the request Refund would send.
	LookupRefund(ctx context.Context, req ProviderRefund) (ProviderDecision, error)
}

// RefundOutcomeKind says what a refund ended in.
type RefundOutcomeKind int

const (
	// RefundSucceeded: a new refund, made by the provider.
	RefundSucceeded RefundOutcomeKind = iota + 1
	// RefundDeclined: a new refund, declined; its amount was given back.
	RefundDeclined
	// RefundFailed: a new refund the provider refused for good; its amount
	// was given back.
	RefundFailed
	// RefundAlreadyRecorded: a new key for an external refund recorded as
	// the same refund; the existing refund is the answer.
	RefundAlreadyRecorded
	// RefundExternalRefundConflict: the external refund is recorded as
	// another refund (or another client's).
	RefundExternalRefundConflict
	// RefundReceived: a new refund the provider received and decides later
	// (AnswersReceived); it stays PENDING, its amount counted, until the
	// provider's event settles it.
	RefundReceived
)

// RefundOutcome is what a refund ended in, before it is rendered.
type RefundOutcome struct {
	// Kind is what it ended in.
	Kind RefundOutcomeKind
	// Refund is the refund the answer shows; empty for the conflict.
	Refund domain.Refund
}

// RefundResponses renders a refund's outcome into the answer stored for
// its key, scope (each Transport implements it).
type RefundResponses interface {
	// EncodeRefundOutcome returns the answer to the outcome, now and on
	// every replay.
	EncodeRefundOutcome(scope IdempotencyScope, o RefundOutcome) (StoredResponse, error)
}

// Refund event types, on the payment events topic.
const (
	// EventPaymentRefunded announces a refund the provider made.
	EventPaymentRefunded = "PaymentRefunded.v1"
	// EventRefundDeclined announces a refund the provider declined.
	EventRefundDeclined = "RefundDeclined.v1"
	// EventRefundFailed announces a refund the provider refused for good.
	EventRefundFailed = "RefundFailed.v1"
)

// RefundEvent announces a refund's outcome, through the outbox like a
// PaymentEvent, keyed by the refunded payment's order.
type RefundEvent struct {
	// ID is the eventId (R-DIST-IDEM-1), a UUID v7.
	ID uuid.UUID
	// Type is EventPaymentRefunded, EventRefundDeclined or EventRefundFailed.
	Type string
	// SagaID is the order's saga; not Valid when unknown.
	SagaID uuid.NullUUID
	// OrderID is the refunded payment's order: the message key.
	OrderID domain.OrderID
	// Refund is the refund with its final status.
	Refund domain.Refund
	// OccurredAt is when the outcome was recorded, in UTC.
	OccurredAt time.Time
}

var refundEventTypes = map[domain.RefundStatus]string{
	domain.RefundSucceeded: EventPaymentRefunded,
	domain.RefundDeclined:  EventRefundDeclined,
	domain.RefundFailed:    EventRefundFailed,
}

// NewRefundEvent builds the event of a refund that has just reached its
// final status.
func NewRefundEvent(r domain.Refund, order domain.OrderID, saga uuid.NullUUID, occurredAt time.Time) (RefundEvent, error) {
	id, typ, err := newEvent(refundEventTypes, r.Status, "refund", int64(r.ID))
	return RefundEvent{ID: id, Type: typ, SagaID: saga, OrderID: order, Refund: r, OccurredAt: occurredAt.UTC()}, err
}

// RefundPayment refunds part or all of a payment through the provider that
// charged it, exactly once per idempotency key and per external refund,
// and never beyond the payment's amount under any concurrency. It runs on
// the core; what is the refund's own is refundSteps:
//
//   - before the claim, the payment is read (the command needs its currency
//     and provider, which the request does not carry): unknown or another
//     client's is domain.ErrPaymentNotFound, not SUCCEEDED
//     ErrPaymentNotRefundable, neither stored;
//   - its reservation is a PENDING refund, reserved against the payment's
//     refund total in the claim's own statement and linked to the key;
//   - the claim's rare answers: a refund over what the payment has left
//     (ErrRefundExceedsPayment, not stored) and the second layer (the
//     external refund is recorded: the same refund gets it, another a
//     stored conflict);
//   - the call is RefundProvider.Refund with the refund's provider key, and
//     the lookup LookupRefund;
//   - the record sets the refund's final status (a DECLINED or FAILED
//     refund gives its amount back) and appends its event.
type RefundPayment struct {
	db  Transactor
	run *IdempotentCommand[RefundCommand, refundReservation]
}

// NewRefundPayment builds the use case on core.
func NewRefundPayment(core *Core, provider RefundProvider) *RefundPayment {
	uc := &RefundPayment{db: core.db, run: NewIdempotentCommand(core, CommandRefund, &refundSteps{provider: provider})}
	core.resumes(CommandRefund, uc)
	return uc
}

// Handle runs the refund. Errors are the core's (IdempotentCommand.Handle),
// domain.ErrPaymentNotFound, ErrPaymentNotRefundable and
// ErrRefundExceedsPayment.
func (uc *RefundPayment) Handle(ctx context.Context, cmd RefundCommand) (CommandResult, error) {
	return uc.run.Handle(ctx, cmd)
}

// Resume is the completer's retry of an abandoned refund, rebuilt from its
// PENDING refund.
func (uc *RefundPayment) Resume(ctx context.Context, rec IdempotencyRecord) error {
	if rec.RecoveryPoint == nil {
		return ErrNothingReserved
	}
	id := domain.RefundID(*rec.RecoveryPoint)
	refund, err := uc.db.AutoCommit().Refunds.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read refund %d: %w", id, err)
	}
	return uc.run.resume(ctx, rec, refundReservation{refund: refund}, OperationRefundPayment)
}

// ListRefunds lists the refunds of one of the client's payments.
type ListRefunds struct {
	db Transactor
}

// NewListRefunds builds the query.
func NewListRefunds(db Transactor) *ListRefunds { return &ListRefunds{db: db} }

// Handle returns the payment's refunds, oldest first; domain.ErrPaymentNotFound
// for a payment that does not exist or is another client's.
func (uc *ListRefunds) Handle(ctx context.Context, client domain.ClientID, id domain.PaymentID) ([]domain.Refund, error) {
	var refunds []domain.Refund
	err := uc.db.Transact(ctx, func(ctx context.Context, r Repos) error {
		if _, err := clientPayment(ctx, r, client, id); err != nil {
			return err
		}
		var err error
		refunds, err = r.Refunds.List(ctx, id)
		return err
	})
	return refunds, err
}

// refundReservation is the refund's recovery point: the PENDING refund,
// with what its call and its event need of the payment.
type refundReservation struct {
	refund    domain.Refund
	chargeKey string // the payment's provider key: how the provider knows the charge
	// paymentKey and paymentReservedAt are the payment's own provider key
	// and reservation time (ProviderRefund.PaymentKey).
	paymentKey        string
	paymentReservedAt time.Time
	orderID           domain.OrderID
	saga              uuid.NullUUID
}

// LogValue names the reservation in log lines.
func (t refundReservation) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("refund_id", int64(t.refund.ID)), slog.Int64("payment_id", int64(t.refund.PaymentID)))
}

// refundSteps are the refund's own parts of the core's protocol.
type refundSteps struct {
	provider RefundProvider
}

// Rebuild: the refund t.
func (*refundSteps) Rebuild(scope IdempotencyScope, t refundReservation, operation string) RefundCommand {
	return RefundCommand{Scope: scope, PaymentID: t.refund.PaymentID, Amount: t.refund.Amount.Amount(),
		ExternalRefundID: t.refund.ExternalRefundID, Operation: operation}
}

// Claim: phase 1, after the payment's read. On the pool both are
// statements of their own, with no transaction around them (a SUCCEEDED
// payment never changes again, so the read cannot go stale before the
// claim); in the transaction, both use its connection.
func (s *refundSteps) Claim(ctx context.Context, r Repos, cmd RefundCommand, k KeyClaim) (Claimed[refundReservation], error) {
	p, err := clientPayment(ctx, r, cmd.Scope.ClientID, cmd.PaymentID)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	want, err := refundOf(cmd, p)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	if err := s.provider.Abilities().takesAmount(want.Amount); err != nil {
		return Claimed[refundReservation]{}, err
	}
	if p.Charge.Manual() {
		// The provider knows a two-step payment's money by its capture:
		// the refund names the capture's key, a statement more.
		if p, err = withCaptureKey(ctx, r, p); err != nil {
			return Claimed[refundReservation]{}, err
		}
	}
	res, err := r.Refunds.Claim(ctx, k, want)
	switch {
	case err != nil:
		return Claimed[refundReservation]{}, err
	case !res.Claimed:
		return Claimed[refundReservation]{Kind: ClaimKeyHeld}, nil
	case res.Reserved:
		return claimedRefund(ClaimFresh, p, *res.Refund, res.SagaID), nil
	case res.Refund != nil && !res.Refund.Status.Final():
		return claimedRefund(ClaimResumed, p, *res.Refund, res.SagaID), nil
	case res.Refund != nil:
		// A final refund under a claim still in progress: only after a
		// manual repair (phase 3 is one statement). Store what it says,
		// without a second event.
		return s.answer(ctx, r, k, *res.Refund, RefundSucceeded)
	}
	// Claimed, and nothing reserved: Reserve says why (or reserves, if what
	// stood in the way has gone since).
	in, err := r.Refunds.Reserve(ctx, k, want)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	switch in.Kind {
	case RefundReserved:
		return claimedRefund(ClaimFresh, p, in.Refund, res.SagaID), nil
	case RefundPaymentNotFound:
		return Claimed[refundReservation]{}, domain.ErrPaymentNotFound
	case RefundPaymentNotRefundable:
		return Claimed[refundReservation]{}, ErrPaymentNotRefundable
	case RefundOverTheAmount:
		// Rolled back, not stored: a PENDING refund that counts now may be
		// declined, and then this very refund fits.
		return Claimed[refundReservation]{}, ErrRefundExceedsPayment
	case RefundExternalRefundExists:
		// The second layer for refunds: the same refund of the same client
		// gets it, anything else a conflict; neither reaches the provider.
		if in.ClientID != cmd.Scope.ClientID || !in.Refund.IsSameRefund(want) {
			return s.answer(ctx, r, k, domain.Refund{}, RefundExternalRefundConflict)
		}
		if !in.Refund.Status.Final() {
			// The same refund is being made under another key right now.
			return Claimed[refundReservation]{}, &InProgressError{RetryAfter: minRetryAfter}
		}
		return s.answer(ctx, r, k, in.Refund, RefundAlreadyRecorded)
	default:
		return Claimed[refundReservation]{}, fmt.Errorf("reserve refund: unknown reservation kind %s", in.Kind)
	}
}

// refundOf is the refund the command asks for, checked against its payment.
func refundOf(cmd RefundCommand, p domain.Payment) (domain.Refund, error) {
	if p.Status != domain.PaymentSucceeded {
		return domain.Refund{}, ErrPaymentNotRefundable
	}
	if cmd.Amount.GreaterThan(p.CapturedAmount().Amount()) {
		return domain.Refund{}, ErrRefundExceedsPayment
	}
	amount, err := domain.NewMoney(cmd.Amount, p.Charge.Amount.Currency())
	if err != nil {
		return domain.Refund{}, err
	}
	return domain.NewRefund(p, amount, cmd.ExternalRefundID)
}

// claimedRefund is a claim with a refund to make.
func claimedRefund(kind ClaimKind, p domain.Payment, refund domain.Refund, saga uuid.NullUUID) Claimed[refundReservation] {
	chargeKey := p.Charge.ProviderIdempotencyKey()
	if p.CaptureKey != "" {
		chargeKey = p.CaptureKey
	}
	return Claimed[refundReservation]{Kind: kind, Reservation: refundReservation{
		refund: refund, chargeKey: chargeKey, paymentKey: p.Charge.ProviderIdempotencyKey(), paymentReservedAt: p.CreatedAt,
		orderID: p.Charge.OrderID, saga: saga,
	}}
}

// withCaptureKey is the captured two-step payment p with the provider key
// of its capture, which its refunds name.
func withCaptureKey(ctx context.Context, r Repos, p domain.Payment) (domain.Payment, error) {
	_, capture, err := r.Transitions.Blocking(ctx, p.ID)
	if err != nil {
		return p, err
	}
	if capture == nil || capture.Kind != domain.TransitionCapture || capture.Status != domain.PaymentSucceeded {
		return p, fmt.Errorf("payment %d is %s with no capture: %w", p.ID, p.Status, ErrPaymentNotRefundable)
	}
	p.CaptureKey = capture.ProviderIdempotencyKey(p)
	return p, nil
}

// answer stores an answer that needs no provider call. A declined or
// failed refund is shown as such.
func (s *refundSteps) answer(ctx context.Context, r Repos, k KeyClaim, refund domain.Refund, kind RefundOutcomeKind) (Claimed[refundReservation], error) {
	switch refund.Status {
	case domain.RefundDeclined:
		kind = RefundDeclined
	case domain.RefundFailed:
		kind = RefundFailed
	}
	resp, err := k.answers.EncodeRefundOutcome(k.Scope, RefundOutcome{Kind: kind, Refund: refund})
	return storeAnswer[refundReservation](ctx, r, k, resp, err)
}

// Call: phase 2, the refund at the provider.
func (s *refundSteps) Call(ctx context.Context, t refundReservation) (ProviderDecision, error) {
	return s.provider.Refund(ctx, t.providerRefund())
}

// providerRefund is the refund as the provider is asked for it.
func (t refundReservation) providerRefund() ProviderRefund {
	return ProviderRefund{IdempotencyKey: t.refund.ProviderIdempotencyKey(), ChargeKey: t.chargeKey,
		PaymentKey: t.paymentKey, PaymentReservedAt: t.paymentReservedAt, ReservedAt: t.refund.CreatedAt, Refund: t.refund}
}

// Lookup: what the provider holds under the refund's provider key.
func (s *refundSteps) Lookup(ctx context.Context, t refundReservation) (ProviderDecision, error) {
	return s.provider.LookupRefund(ctx, t.providerRefund())
}

// Abilities: those of the provider that refunds.
func (s *refundSteps) Abilities(refundReservation) ProviderAbilities {
	return s.provider.Abilities()
}

// refundOutcomes are the answer each settlement of a new refund records.
var refundOutcomes = map[Settlement]RefundOutcomeKind{
	SettledApproved: RefundSucceeded,
	SettledDeclined: RefundDeclined,
	SettledFailed:   RefundFailed,
}

// Record: phase 3, one event per refund outcome as for the charge.
func (s *refundSteps) Record(ctx context.Context, r Repos, k KeyClaim, t refundReservation, settled Settlement) (StoredResponse, error) {
	refund := t.refund
	refund.Status = settled.Status()
	resp, err := k.answers.EncodeRefundOutcome(k.Scope, RefundOutcome{Kind: refundOutcomes[settled], Refund: refund})
	if err != nil {
		return StoredResponse{}, err
	}
	event, err := NewRefundEvent(refund, t.orderID, t.saga, time.Now())
	if err != nil {
		return StoredResponse{}, err
	}
	return resp, r.Refunds.Record(ctx, RefundRecord{Key: k, Response: resp, Event: event})
}

// RecordReceived: the provider received the refund. The key's answer is
// the PENDING refund (202), whose amount counts in the payment's refund
// total until its event settles it. A transport whose answer says the
// outcome (a saga compensation's reply) has none to give yet: it answers
// ErrAnswerAwaitsSettlement, and the key waits for the settlement.
func (s *refundSteps) RecordReceived(ctx context.Context, r Repos, k KeyClaim, t refundReservation) (StoredResponse, error) {
	resp, err := k.answers.EncodeRefundOutcome(k.Scope, RefundOutcome{Kind: RefundReceived, Refund: t.refund})
	if err != nil {
		return StoredResponse{}, err
	}
	return resp, r.Refunds.RecordReceived(ctx, k, resp, t.refund.ID)
}

// SettleReceived: the provider decided a received refund, whose key is
// answered already: its final status, its amount given back unless it
// was made, its event.
func (s *refundSteps) SettleReceived(ctx context.Context, r Repos, t refundReservation, settled Settlement) (bool, error) {
	refund := t.refund
	refund.Status = settled.Status()
	event, err := NewRefundEvent(refund, t.orderID, t.saga, time.Now())
	if err != nil {
		return false, err
	}
	return r.Refunds.SettleReceived(ctx, event)
}

// Release: the claim and the PENDING refund go, and its amount stops
// counting, since the provider did not act on it.
func (s *refundSteps) Release(ctx context.Context, r Repos, k KeyClaim, t refundReservation) error {
	return r.Refunds.Release(ctx, k, t.refund.ID)
}

// Reported finds the refund a provider's event names by its provider key,
// in r's transaction.
func (s *refundSteps) Reported(ctx context.Context, r Repos, ev ProviderEvent) (Report[refundReservation], bool, error) {
	external, ok := domain.ExternalRefundOfProviderKey(ev.Provider, ev.ProviderKey)
	if !ok {
		return Report[refundReservation]{}, false, nil
	}
	rep, found, err := r.ProviderReports.Refund(ctx, ev.Provider, external)
	if err != nil || !found {
		return Report[refundReservation]{}, false, err
	}
	return Report[refundReservation]{Reservation: claimedRefund(ClaimResumed, rep.Payment, rep.Refund, rep.Saga).Reservation,
		Status: rep.Refund.Status, Amount: rep.Refund.Amount, Claim: rep.Claim}, true, nil
}
