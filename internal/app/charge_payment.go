package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// OperationChargePayment is the Operation of a charge made through POST
// /payments. It is part of the command hash, so the completer uses the
// very string the HTTP adapter uses.
const OperationChargePayment = "POST /payments"

// CommandCharge names a charge's idempotency records; the claim statement
// writes it as the literal 'charge' (internal/repository).
const CommandCharge CommandName = "charge"

// ChargeCommand is a client's request to charge, with its idempotency key.
type ChargeCommand struct {
	// Scope is the client and the idempotency key the command came with.
	Scope IdempotencyScope
	// Charge is the validated charge: order, customer, amount, currency,
	// provider and external payment.
	Charge domain.Charge
	// Operation names the endpoint, such as "POST /payments": one key
	// cannot be shared between endpoints.
	Operation string
}

// IdempotencyKey is the client and key the charge came with.
func (c ChargeCommand) IdempotencyKey() IdempotencyScope { return c.Scope }

// Endpoint is the operation the charge came through.
func (c ChargeCommand) Endpoint() string { return c.Operation }

// Hash is SHA-256 over a canonical form of the validated command, built
// from parsed values, not from the request bytes: reordered JSON keys,
// whitespace or "100.5" versus "100.50" are the same command.
//
// An authorization hashes its capture method too, and a charge with a
// payment method its payment method; a charge without either hashes as it
// did before there were such charges, so its stored records stay its own.
func (c ChargeCommand) Hash() string {
	parts := []string{
		"v1",
		c.Operation,
		strconv.FormatInt(int64(c.Charge.OrderID), 10),
		strconv.FormatInt(int64(c.Charge.CustomerID), 10),
		c.Charge.Amount.Amount().String(), // canonical: no trailing zeros
		string(c.Charge.Amount.Currency()),
		string(c.Charge.Provider),
		string(c.Charge.ExternalPaymentID),
	}
	if c.Charge.Manual() {
		parts = append(parts, string(domain.CaptureManual))
	}
	if c.Charge.PaymentMethod != "" {
		parts = append(parts, "payment_method", c.Charge.PaymentMethod)
	}
	return canonicalHash(parts...)
}

// ChargeStore is the payment table: the second layer of R-DIST-IDEM-4
// (one row per provider and external payment) and the third (at most one
// PENDING or SUCCEEDED payment per order), and a charge's statements.
type ChargeStore interface {
	// Claim is phase 1 in one statement: a PENDING payment reserved for c
	// (unless a unique index says no, or the order does not match) and
	// the key claimed, linked to it; or the takeover of an IN_PROGRESS
	// record of the same command whose lock expired, which keeps the
	// record's own payment. On the pool it commits only a claimed key with
	// a PENDING payment, and returns ErrClaimNeedsTransaction otherwise.
	Claim(ctx context.Context, k KeyClaim, c domain.Charge) (ChargeClaimed, error)
	// ClaimStep is Claim for a saga step tried for the first time, on the
	// pool only: the step's saga_step row (a charge's, with k's command
	// hash as its content hash) is inserted in the same statement, before
	// the payment and the key, and the claim is made only if that row is
	// new. It commits only the usual answer, row and claim together, and
	// returns ErrClaimNeedsTransaction, having committed nothing, for any
	// other: the step's name taken among them.
	ClaimStep(ctx context.Context, k KeyClaim, c domain.Charge, step SagaStep) (ChargeClaimed, error)
	// Reserve is phase 1's rare path, after a claim that met a payment in
	// the way: it reserves the payment (and links k's record to it) or
	// returns the payment that stands in the way.
	Reserve(ctx context.Context, k KeyClaim, c domain.Charge) (ChargeReservation, error)
	// Record is phase 3 in one statement: the key completed with the
	// response, fenced by the token; the payment's final status (the
	// event's payment's); the event appended to the outbox. ErrLockLost if
	// the token no longer owns the key.
	Record(ctx context.Context, rec ChargeRecord) error
	// Release deletes the claim and its PENDING payment, fenced by the
	// token; ErrLockLost if the token no longer owns the key.
	Release(ctx context.Context, k KeyClaim, payment domain.PaymentID) error
	// Get reads a payment; domain.ErrPaymentNotFound if there is none.
	Get(ctx context.Context, id domain.PaymentID) (domain.Payment, error)
}

// ChargeClaimed is what the charge's phase 1 statement did.
type ChargeClaimed struct {
	// Claimed: the key is this attempt's now (new, or taken over).
	Claimed bool
	// Reserved: a new PENDING payment was inserted, the claim's recovery
	// point.
	Reserved bool
	// OrderMatches: the projection holds the order, with the charge's
	// customer, amount and currency.
	OrderMatches bool
	// SagaID is the order's saga, for the payment's event.
	SagaID uuid.NullUUID
	// Payment is the reserved payment or, after a takeover, the recovery
	// point's; nil when neither.
	Payment *domain.Payment
	// Standing is the key's record that the claim found in its way, and
	// wrote nothing for: nil when none stood.
	Standing *IdempotencyRecord
}

// ChargeReservationKind says what Reserve did.
type ChargeReservationKind int

const (
	// ChargeReserved: a new PENDING payment was inserted.
	ChargeReserved ChargeReservationKind = iota + 1
	// ChargeExternalPaymentExists: a payment with the same provider and
	// external payment id exists (the second layer).
	ChargeExternalPaymentExists
	// ChargeOrderHasLivePayment: the order has a PENDING or SUCCEEDED
	// payment under another external payment (the third layer).
	ChargeOrderHasLivePayment
)

// ChargeReservation is Reserve's answer: the new payment, or the one in
// the way.
type ChargeReservation struct {
	// Kind says whether Payment is new or the row in the way.
	Kind ChargeReservationKind
	// Payment is the reserved payment, or the one that stood in the way.
	Payment domain.Payment
}

// ChargeRecord is what the charge's phase 3 writes.
type ChargeRecord struct {
	// Key is the claim whose token fences the write.
	Key KeyClaim
	// Response is the answer stored for the key.
	Response StoredResponse
	// Event carries the payment with its final status.
	Event PaymentEvent
}

// ProviderCharge is one charge request to a payment provider.
type ProviderCharge struct {
	// IdempotencyKey is derived from the business operation, so the
	// provider charges a payment once however often it is asked.
	IdempotencyKey string
	// Charge is what to charge.
	Charge domain.Charge
	// ReservedAt is when the payment was reserved: no request for it left
	// before, so a lookup that lists the provider's records over a window
	// of time starts there.
	ReservedAt time.Time
}

// ChargeProvider charges money on the other side of a network. Its
// answers are a decision or one of the errors of outcome.go.
type ChargeProvider interface {
	Provider
	// Charge asks the provider to charge req under req.IdempotencyKey.
	Charge(ctx context.Context, req ProviderCharge) (ProviderDecision, error)
	// LookupCharge asks, without charging, what the provider holds of
	// req, the request Charge would send (ErrNoProviderCharge: nothing
	// found; what that proves is the provider's Abilities'; any other
	// error: it cannot be known now).
	LookupCharge(ctx context.Context, req ProviderCharge) (ProviderDecision, error)
}

// AuthorizationProvider holds money for a later capture or void: a charge
// in two steps. Its answers are ChargeProvider's.
type AuthorizationProvider interface {
	// Authorize asks the provider to hold req's amount under
	// req.IdempotencyKey.
	Authorize(ctx context.Context, req ProviderCharge) (ProviderDecision, error)
	// LookupAuthorization asks, without authorizing, what the provider
	// holds of req.
	LookupAuthorization(ctx context.Context, req ProviderCharge) (ProviderDecision, error)
	// Hold says where the hold of req, an approved authorization, stands
	// now: HoldExpired once the provider's own time for it has passed
	// (ErrNoProviderCharge: no authorization found; any other error: it
	// cannot be known now).
	Hold(ctx context.Context, req ProviderCharge) (HoldStatus, error)
}

// HoldStatus is where an authorization's hold stands at the provider.
type HoldStatus string

const (
	// HoldActive: the money is held, and may be captured or voided.
	HoldActive HoldStatus = "active"
	// HoldCaptured: the hold was captured.
	HoldCaptured HoldStatus = "captured"
	// HoldVoided: the hold was released by a void.
	HoldVoided HoldStatus = "voided"
	// HoldExpired: the hold lapsed; nothing can be captured any more.
	HoldExpired HoldStatus = "expired"
)

// ChargeOutcomeKind says what a charge ended in.
type ChargeOutcomeKind int

const (
	// ChargeSucceeded: a new payment, approved by the provider.
	ChargeSucceeded ChargeOutcomeKind = iota + 1
	// ChargeDeclined: a new payment, declined by the provider.
	ChargeDeclined
	// ChargeFailed: a new payment that the provider refused for good, with
	// no charge under its key; it is recorded FAILED.
	ChargeFailed
	// ChargeAlreadyRecorded: a new key for an external payment recorded as
	// the same charge; the existing payment is the answer.
	ChargeAlreadyRecorded
	// ChargeExternalPaymentConflict: the external payment is recorded as
	// another charge (or another client's).
	ChargeExternalPaymentConflict
	// ChargeOrderAlreadyPaid: the order is paid under another external
	// payment; nothing was sent to the provider.
	ChargeOrderAlreadyPaid
)

// ChargeOutcome is what a charge ended in, before it is rendered.
type ChargeOutcome struct {
	// Kind is what it ended in.
	Kind ChargeOutcomeKind
	// Payment is the payment the answer shows; empty for the conflicts,
	// which reveal no payment.
	Payment domain.Payment
}

// ChargeResponses renders a charge's outcome into the answer stored for
// its key, scope, and sent to the client (each Transport implements it),
// so the use case stores the exact answer with the payment without knowing
// how it travels.
type ChargeResponses interface {
	// EncodeChargeOutcome returns the answer to the outcome, now and on
	// every replay.
	EncodeChargeOutcome(scope IdempotencyScope, o ChargeOutcome) (StoredResponse, error)
}

// Payment event types. The suffix is the payload's version: a change that
// is not backward compatible gets a new type.
const (
	// EventPaymentSucceeded announces a payment the provider charged.
	EventPaymentSucceeded = "PaymentSucceeded.v1"
	// EventPaymentDeclined announces a payment the provider declined.
	EventPaymentDeclined = "PaymentDeclined.v1"
	// EventPaymentFailed announces a payment the provider refused for good.
	EventPaymentFailed = "PaymentFailed.v1"
	// EventPaymentAuthorized announces a two-step payment the provider
	// holds the money of.
	EventPaymentAuthorized = "PaymentAuthorized.v1"
)

// PaymentEvent announces a payment's outcome to other services. It is
// appended to the outbox by the statement that records the outcome and
// published by the relay after the commit.
type PaymentEvent struct {
	// ID is the eventId of R-DIST-IDEM-1, a UUID v7 made once: every
	// publication of the event carries it, so consumers dedup on it.
	ID uuid.UUID
	// Type is EventPaymentSucceeded, EventPaymentDeclined or EventPaymentFailed.
	Type string
	// SagaID is the order's saga; not Valid when the order named none.
	SagaID uuid.NullUUID
	// Payment is the payment with its final status.
	Payment domain.Payment
	// Transition is the capture or void the event announces; nil for the
	// payment's own outcome.
	Transition *domain.Transition
	// OccurredAt is when the outcome was recorded, in UTC.
	OccurredAt time.Time
}

var paymentEventTypes = map[domain.PaymentStatus]string{
	domain.PaymentSucceeded:  EventPaymentSucceeded,
	domain.PaymentDeclined:   EventPaymentDeclined,
	domain.PaymentFailed:     EventPaymentFailed,
	domain.PaymentAuthorized: EventPaymentAuthorized,
	domain.PaymentExpired:    EventPaymentExpired,
}

// NewPaymentEvent builds the event of a payment that has just reached its
// final status.
func NewPaymentEvent(p domain.Payment, saga uuid.NullUUID, occurredAt time.Time) (PaymentEvent, error) {
	id, typ, err := newEvent(paymentEventTypes, p.Status, "payment", int64(p.ID))
	return PaymentEvent{ID: id, Type: typ, SagaID: saga, Payment: p, OccurredAt: occurredAt.UTC()}, err
}

// ChargePayment charges an order through a payment provider, exactly once
// per idempotency key, per external payment and per order. It runs on the
// core (idempotent_command.go); what is the charge's own is chargeSteps:
//
//   - its reservation is a PENDING payment, reserved in the claim's own
//     statement after checking the order (decision 0013);
//   - the claim's rare answers are the second layer (the external payment
//     is recorded: the same charge gets it, another gets a conflict) and
//     the third (one paid order is paid once), answered without a call;
//   - the call is ChargeProvider.Charge with a provider key derived from
//     the external payment, and the lookup LookupCharge;
//   - the record sets the payment's final status and appends its
//     PaymentSucceeded/Declined/Failed event.
type ChargePayment struct {
	db          Transactor
	providers   map[domain.ProviderName]ChargeProvider
	authorizers map[domain.ProviderName]AuthorizationProvider
	steps       *chargeSteps
	run         *IdempotentCommand[ChargeCommand, chargeReservation]
}

// NewChargePayment builds the use case on core. A provider that is an
// AuthorizationProvider too takes two-step payments (CaptureManual).
func NewChargePayment(core *Core, providers map[domain.ProviderName]ChargeProvider) *ChargePayment {
	authorizers := map[domain.ProviderName]AuthorizationProvider{}
	for name, p := range providers {
		if a, ok := p.(AuthorizationProvider); ok {
			authorizers[name] = a
		}
	}
	steps := &chargeSteps{providers: providers, authorizers: authorizers}
	uc := &ChargePayment{db: core.db, providers: providers, authorizers: authorizers, steps: steps,
		run: NewIdempotentCommand(core, CommandCharge, steps)}
	core.resumes(CommandCharge, uc)
	return uc
}

// Handle runs the charge. Errors are the core's (IdempotentCommand.Handle),
// ErrUnknownProvider, domain.ErrOrderNotFound and domain.ErrOrderMismatch.
func (uc *ChargePayment) Handle(ctx context.Context, cmd ChargeCommand) (CommandResult, error) {
	// Before the claim: an invalid command stores nothing, so the client
	// can fix it and retry with the same key.
	if err := uc.accepts(cmd.Charge); err != nil {
		return CommandResult{}, err
	}
	return uc.run.Handle(ctx, cmd)
}

// accepts says whether a charge can be carried out at all: its provider is
// known, takes two-step payments if the charge is one, and can be sent its
// amount as it is (a provider that counts in minor units).
func (uc *ChargePayment) accepts(c domain.Charge) error {
	p, ok := uc.providers[c.Provider]
	if !ok {
		return ErrUnknownProvider
	}
	if _, ok := uc.authorizers[c.Provider]; c.Manual() && !ok {
		return ErrNoTwoStepPayments
	}
	return p.Abilities().takesAmount(c.Amount)
}

// Resume is the completer's retry of an abandoned charge, rebuilt from its
// PENDING payment. A record that does not match its payment is left for
// the client's own retry rather than guessed at.
func (uc *ChargePayment) Resume(ctx context.Context, rec IdempotencyRecord) error {
	if rec.RecoveryPoint == nil {
		return ErrNothingReserved
	}
	id := domain.PaymentID(*rec.RecoveryPoint)
	payment, err := uc.db.AutoCommit().Charges.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("read payment %d: %w", id, err)
	}
	return uc.run.resume(ctx, rec, chargeReservation{payment: payment}, OperationChargePayment)
}

// ClaimReadsKey: the charge's claim statement reads the key first
// (KeyReadingSteps), and answers a record in its way with Standing.
func (*chargeSteps) ClaimReadsKey() {}

// chargeReservation is the charge's recovery point: the PENDING payment,
// with the order's saga for its event.
type chargeReservation struct {
	payment domain.Payment
	saga    uuid.NullUUID
}

// LogValue names the reservation in log lines.
func (t chargeReservation) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("payment_id", int64(t.payment.ID)), slog.String("provider", string(t.payment.Charge.Provider)))
}

// chargeSteps are the charge's own parts of the core's protocol.
type chargeSteps struct {
	providers   map[domain.ProviderName]ChargeProvider
	authorizers map[domain.ProviderName]AuthorizationProvider
}

// Rebuild: the charge of payment t.
func (*chargeSteps) Rebuild(scope IdempotencyScope, t chargeReservation, operation string) ChargeCommand {
	return ChargeCommand{Scope: scope, Charge: t.payment.Charge, Operation: operation}
}

// Claim: phase 1. On the pool only the usual answer comes back: a fresh
// or resumed PENDING payment.
func (s *chargeSteps) Claim(ctx context.Context, r Repos, cmd ChargeCommand, k KeyClaim) (Claimed[chargeReservation], error) {
	res, err := r.Charges.Claim(ctx, k, cmd.Charge)
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	switch {
	case !res.Claimed:
		return Claimed[chargeReservation]{Kind: ClaimKeyHeld, Record: res.Standing}, nil
	case res.Reserved:
		return claimedPayment(ClaimFresh, *res.Payment, res.SagaID), nil
	case res.Payment != nil && !res.Payment.Status.Final():
		// A takeover: an earlier attempt crashed, or lost the provider's
		// answer, after reserving the payment.
		return claimedPayment(ClaimResumed, *res.Payment, res.SagaID), nil
	case res.Payment != nil:
		// A final payment under a claim still in progress: phase 3 ends
		// both in one statement, so only a manual repair of the tables
		// gets here. The provider has answered: store that answer, with
		// no second event.
		return s.answer(ctx, r, k, *res.Payment, ChargeSucceeded)
	case !res.OrderMatches:
		// An error rolls the claim back: an unknown or mismatching order
		// is not the key's outcome, so a retry after the order arrives
		// succeeds.
		order, err := r.Orders.Get(ctx, cmd.Charge.OrderID)
		if err != nil {
			return Claimed[chargeReservation]{}, err
		}
		if err := order.Accepts(cmd.Charge); err != nil {
			return Claimed[chargeReservation]{}, err
		}
		// The order changed between the statements: let the retry see it.
		return Claimed[chargeReservation]{}, ErrReserveContended
	}
	// Claimed, the order matches, and a payment stood in the way of the
	// reservation. Reserve says which (or reserves, if it has gone since).
	in, err := r.Charges.Reserve(ctx, k, cmd.Charge)
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	switch in.Kind {
	case ChargeReserved:
		return claimedPayment(ClaimFresh, in.Payment, res.SagaID), nil
	case ChargeExternalPaymentExists:
		// The second layer (R-DIST-IDEM-4): the same charge gets the
		// existing payment, any other charge a conflict; neither reaches
		// the provider.
		if !in.Payment.IsSameCharge(cmd.Scope.ClientID, cmd.Charge) {
			return s.answer(ctx, r, k, domain.Payment{}, ChargeExternalPaymentConflict)
		}
		if !in.Payment.Status.Final() {
			// The same charge is being made under another key right now.
			// Roll back: nothing is stored, and the retry finds it done.
			return Claimed[chargeReservation]{}, &InProgressError{RetryAfter: minRetryAfter}
		}
		return s.answer(ctx, r, k, in.Payment, ChargeAlreadyRecorded)
	case ChargeOrderHasLivePayment:
		// The third layer: one paid order is paid once, whatever keys and
		// external payments the client makes up (R-DIST-IDEM-X3).
		if in.Payment.Status == domain.PaymentPending {
			// Another payment for the order is in flight, or its outcome
			// unknown. Roll back: if it is declined, this one may go ahead.
			return Claimed[chargeReservation]{}, &InProgressError{RetryAfter: minRetryAfter}
		}
		return s.answer(ctx, r, k, domain.Payment{}, ChargeOrderAlreadyPaid)
	default:
		return Claimed[chargeReservation]{}, fmt.Errorf("reserve payment: unknown reservation kind %d", in.Kind)
	}
}

// claimedPayment is a claim with a payment to charge.
func claimedPayment(kind ClaimKind, p domain.Payment, saga uuid.NullUUID) Claimed[chargeReservation] {
	return Claimed[chargeReservation]{Kind: kind, Reservation: chargeReservation{payment: p, saga: saga}}
}

// answer stores an answer that needs no provider call as the key's
// outcome. A declined or failed payment is shown as such.
func (s *chargeSteps) answer(ctx context.Context, r Repos, k KeyClaim, p domain.Payment, kind ChargeOutcomeKind) (Claimed[chargeReservation], error) {
	switch p.Status {
	case domain.PaymentDeclined:
		kind = ChargeDeclined
	case domain.PaymentFailed:
		kind = ChargeFailed
	}
	resp, err := k.answers.EncodeChargeOutcome(k.Scope, ChargeOutcome{Kind: kind, Payment: p})
	return storeAnswer[chargeReservation](ctx, r, k, resp, err)
}

// Call: phase 2, the charge at the provider, or the authorization of a
// two-step payment.
func (s *chargeSteps) Call(ctx context.Context, t chargeReservation) (ProviderDecision, error) {
	req := providerChargeOf(t.payment)
	if t.payment.Charge.Manual() {
		return s.authorizers[t.payment.Charge.Provider].Authorize(ctx, req)
	}
	return s.providers[t.payment.Charge.Provider].Charge(ctx, req)
}

// providerChargeOf is payment p's charge (or authorization) as the
// provider is asked for it, and looked up.
func providerChargeOf(p domain.Payment) ProviderCharge {
	return ProviderCharge{IdempotencyKey: p.Charge.ProviderIdempotencyKey(), Charge: p.Charge, ReservedAt: p.CreatedAt}
}

// Lookup: what the provider holds of the payment's charge.
func (s *chargeSteps) Lookup(ctx context.Context, t chargeReservation) (ProviderDecision, error) {
	req := providerChargeOf(t.payment)
	if t.payment.Charge.Manual() {
		return s.authorizers[t.payment.Charge.Provider].LookupAuthorization(ctx, req)
	}
	return s.providers[t.payment.Charge.Provider].LookupCharge(ctx, req)
}

// Abilities: those of the provider the payment is made at.
func (s *chargeSteps) Abilities(t chargeReservation) ProviderAbilities {
	return s.providers[t.payment.Charge.Provider].Abilities()
}

// settledStatus is the status a settlement gives payment p: an approved
// authorization holds the money (AUTHORIZED), an approved charge took it.
func settledStatus(p domain.Payment, settled Settlement) domain.PaymentStatus {
	if settled == SettledApproved && p.Charge.Manual() {
		return domain.PaymentAuthorized
	}
	return settled.Status()
}

// chargeOutcomes are the answer each settlement of a new payment records.
var chargeOutcomes = map[Settlement]ChargeOutcomeKind{
	SettledApproved: ChargeSucceeded,
	SettledDeclined: ChargeDeclined,
	SettledFailed:   ChargeFailed,
}

// Record: phase 3. Exactly one event per payment outcome: only this
// statement appends one, it writes only for the claim that still owns the
// payment's record, and a payment is linked to one record (its recovery
// point). Replays and the phase 1 answers store a response without a
// transition, so they append nothing.
func (s *chargeSteps) Record(ctx context.Context, r Repos, k KeyClaim, t chargeReservation, settled Settlement) (StoredResponse, error) {
	outcome := ChargeOutcome{Kind: chargeOutcomes[settled], Payment: t.payment}
	outcome.Payment.Status = settledStatus(t.payment, settled)
	resp, err := k.answers.EncodeChargeOutcome(k.Scope, outcome)
	if err != nil {
		return StoredResponse{}, err
	}
	event, err := NewPaymentEvent(outcome.Payment, t.saga, time.Now())
	if err != nil {
		return StoredResponse{}, err
	}
	return resp, r.Charges.Record(ctx, ChargeRecord{Key: k, Response: resp, Event: event})
}

// Release: the claim and its PENDING payment go, since the provider did
// not charge. The charge's claim locks no row before its key (its insert
// locks no existing payment), so the key goes first.
func (s *chargeSteps) Release(ctx context.Context, r Repos, k KeyClaim, t chargeReservation) error {
	return r.Charges.Release(ctx, k, t.payment.ID)
}

// Reported finds the payment a provider's event names by its provider key,
// in r's transaction.
func (s *chargeSteps) Reported(ctx context.Context, r Repos, ev ProviderEvent) (Report[chargeReservation], bool, error) {
	external, ok := domain.ExternalPaymentOfProviderKey(ev.Provider, ev.ProviderKey)
	if !ok {
		return Report[chargeReservation]{}, false, nil
	}
	rep, found, err := r.ProviderReports.Charge(ctx, ev.Provider, external)
	if err != nil || !found {
		return Report[chargeReservation]{}, false, err
	}
	status := rep.Payment.Status
	if rep.Payment.Charge.Manual() && rep.Payment.Status.Final() && rep.Payment.Status != domain.PaymentDeclined && rep.Payment.Status != domain.PaymentFailed {
		// Captured, voided or lapsed: what came after the authorization
		// is another command's, and the authorization itself stands.
		status = domain.PaymentAuthorized
	}
	return Report[chargeReservation]{Reservation: chargeReservation{payment: rep.Payment, saga: rep.Saga},
		Status: status, Approved: settledStatus(rep.Payment, SettledApproved),
		Amount: rep.Payment.Charge.Amount, Claim: rep.Claim}, true, nil
}
