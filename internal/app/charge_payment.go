package app

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/example/payment-service/internal/domain"
)

// ChargePayment charges an order through a payment provider, exactly once
// per idempotency key, per external payment and per order.
//
// It runs on the core that every money-moving command shares
// (IdempotentCommand, idempotent_command.go: the read, the three phases,
// the outcome model, tracing and the shutdown drain). What is the charge's
// own is here, as chargeSteps:
//
//   - its reservation is a PENDING payment, reserved in the claim's own
//     statement and linked to the key as its recovery point (decision
//     0013), after checking the order;
//   - the claim's rare answers are the second layer (the external payment
//     is recorded: the same charge gets it, another gets a conflict) and
//     the third (one paid order is paid once), answered without a provider
//     call;
//   - the provider call is PaymentProvider.Charge with a provider key
//     derived from the external payment, and the lookup LookupCharge;
//   - the record sets the payment's final status and appends its
//     PaymentSucceeded/Declined/Failed event.
//
// The provider's answer can be lost (PaymentProvider lists the cases). Only
// a "not charged for now" answer to a payment this request reserved itself
// gives the key back, and only a refusal for good that the provider's own
// record confirms ends a payment FAILED; every other failure after the call
// keeps the claim and its PENDING payment, ends the lock early and answers
// OutcomeUnknownError: the next retry with the key, or the completer, asks
// the provider again with the same provider key and records its answer.
type ChargePayment struct {
	tx        Transactor
	providers map[domain.ProviderName]PaymentProvider
	run       *IdempotentCommand[ChargeCommand, chargeReservation]
}

// NewChargePayment builds the use case on core.
func NewChargePayment(core *Core, store ChargeStore, providers map[domain.ProviderName]PaymentProvider, encoder ResponseEncoder) *ChargePayment {
	return &ChargePayment{tx: core.tx, providers: providers, run: NewIdempotentCommand(core, &chargeSteps{
		tx: core.tx, store: store, providers: providers, encoder: encoder,
	})}
}

// Resume implements Resumable: the completer's retry of an abandoned
// charge, rebuilt from its PENDING payment. The hash must be the stored
// one; a record that does not match its payment is left for the client's
// own retry rather than guessed at.
func (uc *ChargePayment) Resume(ctx context.Context, rec IdempotencyRecord) error {
	if rec.PaymentID == nil {
		return ErrNothingReserved
	}
	var payment domain.Payment
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		payment, err = r.Payments.Get(ctx, *rec.PaymentID)
		return err
	})
	if err != nil {
		return fmt.Errorf("read payment %d: %w", *rec.PaymentID, err)
	}
	cmd := ChargeCommand{Scope: rec.Scope, Charge: payment.Charge, Operation: OperationChargePayment}
	if err := uc.run.rebuilt(rec, cmd); err != nil {
		return fmt.Errorf("payment %d: %w", payment.ID, err)
	}
	_, err = uc.Handle(ctx, cmd)
	return err
}

// ChargeResult is the reply for the client.
type ChargeResult = CommandResult

// Handle runs the command. Errors are ErrKeyReused, *InProgressError,
// *OutcomeUnknownError, ErrUnknownProvider, ErrProviderUnavailable,
// domain.ErrOrderNotFound, domain.ErrOrderMismatch, ErrStoreUnavailable (only
// before the provider is called), or unexpected ones.
func (uc *ChargePayment) Handle(ctx context.Context, cmd ChargeCommand) (ChargeResult, error) {
	if _, ok := uc.providers[cmd.Charge.Provider]; !ok {
		// Checked before the claim: an invalid command stores nothing, so
		// the client can fix it and retry with the same key.
		return ChargeResult{}, ErrUnknownProvider
	}
	return uc.run.Handle(ctx, cmd)
}

// chargeReservation is the charge's recovery point: the PENDING payment,
// with the order's saga for its event.
type chargeReservation struct {
	payment domain.Payment
	saga    uuid.NullUUID
}

// chargeSteps are the charge's own parts of the core's protocol.
type chargeSteps struct {
	tx        Transactor
	store     ChargeStore
	providers map[domain.ProviderName]PaymentProvider
	encoder   ResponseEncoder
}

var _ CommandSteps[ChargeCommand, chargeReservation] = (*chargeSteps)(nil)

// Name implements CommandSteps.
func (*chargeSteps) Name() string { return "charge" }

// Key implements CommandSteps.
func (*chargeSteps) Key(cmd ChargeCommand) (IdempotencyScope, string) { return cmd.Scope, cmd.Hash() }

// SpanAttributes implements CommandSteps.
func (*chargeSteps) SpanAttributes(cmd ChargeCommand) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.Int64("payment.order_id", int64(cmd.Charge.OrderID)),
		attribute.String("payment.provider", string(cmd.Charge.Provider)),
	}
}

// LogAttrs implements CommandSteps.
func (*chargeSteps) LogAttrs(t chargeReservation) []any {
	return []any{"payment_id", t.payment.ID, "provider", t.payment.Charge.Provider}
}

// chargeClaim is phase 1's statement's input.
func chargeClaim(cmd ChargeCommand, k KeyClaim) ChargeClaim {
	return ChargeClaim{Scope: k.Scope, CommandHash: k.CommandHash, Token: k.Token, LockFor: k.LockFor, Charge: cmd.Charge}
}

// ClaimAtOnce implements CommandSteps: phase 1 in one round trip. The
// statement commits on its own when its answer is the usual one, the key
// claimed with a PENDING payment to charge (reserved now, or resumed after a
// takeover). Every other answer is ErrClaimNeedsTransaction, with nothing
// committed.
func (s *chargeSteps) ClaimAtOnce(ctx context.Context, cmd ChargeCommand, k KeyClaim) (Claimed[chargeReservation], error) {
	res, err := s.store.ClaimAndReserve(ctx, chargeClaim(cmd, k))
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	if !res.Claimed || res.Payment == nil {
		return Claimed[chargeReservation]{}, fmt.Errorf("phase 1 committed without a payment to charge (claimed %v)", res.Claimed)
	}
	return Claimed[chargeReservation]{Reservation: chargeReservation{payment: *res.Payment, saga: res.SagaID}, Resumed: !res.Reserved}, nil
}

// Claim implements CommandSteps: phase 1 inside the core's transaction,
// for the answers ClaimAtOnce does not commit.
func (s *chargeSteps) Claim(ctx context.Context, r Repos, cmd ChargeCommand, k KeyClaim) (Claimed[chargeReservation], error) {
	res, err := r.Charges.ClaimAndReserve(ctx, chargeClaim(cmd, k))
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	switch {
	case !res.Claimed:
		// Another request holds the key, or it holds another command.
		return Claimed[chargeReservation]{KeyHeld: true}, nil
	case res.Reserved:
		return reserved(*res.Payment, res.SagaID, false), nil
	case res.Payment != nil && !res.Payment.Status.Final():
		// A takeover: an earlier request crashed, or lost the provider's
		// answer, after reserving the payment.
		return reserved(*res.Payment, res.SagaID, true), nil
	case res.Payment != nil:
		// A final payment under a claim still in progress: phase 3 sets the
		// status and completes the record in one statement, so this only
		// happens after a manual repair of the tables. The provider has
		// answered; record that answer without asking again (and without a
		// second event: the status transition already wrote one).
		return s.completeWith(ctx, r, k, *res.Payment, OutcomeCharged)
	case !res.OrderMatches:
		// Returning an error rolls the claim back: an unknown or
		// mismatching order is not stored as the key's outcome, so a retry
		// after the order arrives succeeds.
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
	// reservation. Reserve reads which (or reserves, if it has gone since).
	in, err := r.Payments.Reserve(ctx, cmd.Scope.ClientID, cmd.Charge)
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	switch in.Kind {
	case Reserved:
		return reserved(in.Payment, res.SagaID, false), r.Idempotency.SetRecoveryPoint(ctx, k.Scope, k.Token, in.Payment.ID)
	case ExternalPaymentExists:
		return s.secondLayer(ctx, r, cmd, k, in.Payment)
	case OrderHasLivePayment:
		return s.thirdLayer(ctx, r, k, in.Payment)
	default:
		return Claimed[chargeReservation]{}, fmt.Errorf("reserve payment: unknown reservation kind %d", in.Kind)
	}
}

// reserved is a claim with a payment to charge.
func reserved(p domain.Payment, saga uuid.NullUUID, resumed bool) Claimed[chargeReservation] {
	return Claimed[chargeReservation]{Reservation: chargeReservation{payment: p, saga: saga}, Resumed: resumed}
}

// secondLayer answers a new key for an external payment that is already
// recorded (R-DIST-IDEM-4): the same charge gets the existing payment, any
// other charge a conflict; neither reaches the provider.
func (s *chargeSteps) secondLayer(ctx context.Context, r Repos, cmd ChargeCommand, k KeyClaim, existing domain.Payment) (Claimed[chargeReservation], error) {
	if !existing.IsSameCharge(cmd.Scope.ClientID, cmd.Charge) {
		return s.completeWith(ctx, r, k, domain.Payment{}, OutcomeExternalPaymentConflict)
	}
	if !existing.Status.Final() {
		// The same charge is being made right now under another key. Roll
		// back: nothing is stored, and the retry finds it finished.
		return Claimed[chargeReservation]{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	return s.completeWith(ctx, r, k, existing, OutcomeAlreadyRecorded)
}

// thirdLayer answers a charge for an order that already has a live payment
// under another external payment: one paid order is paid once, whatever
// keys and external payments the client makes up (R-DIST-IDEM-X3's careless
// client, or a new provider payment intent per attempt).
func (s *chargeSteps) thirdLayer(ctx context.Context, r Repos, k KeyClaim, live domain.Payment) (Claimed[chargeReservation], error) {
	if live.Status == domain.PaymentPending {
		// Another payment for the order is in flight (or its outcome is
		// unknown). Roll back: the retry sees how it ended. If it is
		// declined, this charge may go ahead.
		return Claimed[chargeReservation]{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	return s.completeWith(ctx, r, k, domain.Payment{}, OutcomeOrderAlreadyPaid)
}

// completeWith stores an answer that needs no provider call as the key's
// outcome, in phase 1's transaction.
func (s *chargeSteps) completeWith(ctx context.Context, r Repos, k KeyClaim, p domain.Payment, kind OutcomeKind) (Claimed[chargeReservation], error) {
	switch p.Status {
	case domain.PaymentDeclined:
		kind = OutcomeDeclined
	case domain.PaymentFailed:
		kind = OutcomeFailed
	}
	resp, err := s.encoder.EncodeChargeOutcome(ChargeOutcome{Kind: kind, Payment: p})
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	return Claimed[chargeReservation]{Response: &resp}, r.Idempotency.Complete(ctx, k.Scope, k.Token, resp)
}

// Call implements CommandSteps: phase 2, the charge at the provider.
func (s *chargeSteps) Call(ctx context.Context, t chargeReservation) (ProviderDecision, error) {
	return s.providers[t.payment.Charge.Provider].Charge(ctx, ProviderCharge{
		IdempotencyKey: t.payment.Charge.ProviderIdempotencyKey(),
		Charge:         t.payment.Charge,
	})
}

// Lookup implements CommandSteps: what the provider holds under the
// payment's provider key.
func (s *chargeSteps) Lookup(ctx context.Context, t chargeReservation) (ProviderDecision, error) {
	return s.providers[t.payment.Charge.Provider].LookupCharge(ctx, t.payment.Charge.ProviderIdempotencyKey())
}

// chargeOutcomes are the answer each settlement of a new payment records.
var chargeOutcomes = map[Settlement]OutcomeKind{
	SettledApproved: OutcomeCharged,
	SettledDeclined: OutcomeDeclined,
	SettledFailed:   OutcomeFailed,
}

// Record implements CommandSteps: phase 3, the payment's final status, the
// stored response and the outbox event, in one statement fenced by the lock
// token.
func (s *chargeSteps) Record(ctx context.Context, k KeyClaim, t chargeReservation, settled Settlement) (StoredResponse, error) {
	return s.record(ctx, s.store, k, t, settled)
}

// Reported implements reportedSteps: the payment an event's provider key
// names, recorded, if it is PENDING, by Record's statement in r's
// transaction.
func (s *chargeSteps) Reported(ctx context.Context, r Repos, ev ProviderEvent) (reported, bool, error) {
	return reportedBy(ctx, ev, domain.ExternalPaymentOfProviderKey, r.ProviderReports.Charge, func(rep ReportedCharge) reported {
		t := chargeReservation{payment: rep.Payment, saga: rep.Saga}
		return reported{status: rep.Payment.Status, amount: rep.Payment.Charge.Amount, claim: rep.Claim,
			record: func(ctx context.Context, k KeyClaim, settled Settlement) error {
				_, err := s.record(ctx, r.ChargeStatements, k, t, settled)
				return err
			}}
	})
}

// record is phase 3 through store: the pool's, or a transaction's.
func (s *chargeSteps) record(ctx context.Context, store ChargeStore, k KeyClaim, t chargeReservation, settled Settlement) (StoredResponse, error) {
	outcome := ChargeOutcome{Kind: chargeOutcomes[settled], Payment: t.payment}
	outcome.Payment.Status = settled.Status()
	resp, err := s.encoder.EncodeChargeOutcome(outcome)
	if err != nil {
		return StoredResponse{}, err
	}
	// Exactly one event per payment outcome: only phase 3 appends one, and
	// it commits at most once per payment. The payment is linked to one
	// idempotency record (its recovery point), and the statement writes
	// only for the claim that still owns that record; an owner whose lock
	// was taken over gets ErrLockLost and writes nothing, event included.
	// Replays, the second and third layers and the repair path in Claim
	// store a response without a transition, so they append nothing.
	event, err := NewPaymentEvent(outcome.Payment, t.saga, time.Now())
	if err != nil {
		return StoredResponse{}, err
	}
	err = store.RecordOutcome(ctx, OutcomeRecord{Scope: k.Scope, Token: k.Token, Response: resp, Event: event})
	return resp, err
}

// LockParents implements CommandSteps: the charge's claim locks no row
// before its key. It inserts its payment, and an insert that meets an
// existing payment takes no lock on it.
func (s *chargeSteps) LockParents(context.Context, Repos, chargeReservation) error { return nil }

// GiveBack implements CommandSteps: the PENDING payment goes with the
// released key, since the provider did not charge it.
func (s *chargeSteps) GiveBack(ctx context.Context, r Repos, t chargeReservation) error {
	return r.Payments.DeletePending(ctx, t.payment.ID)
}

var (
	_ Resumable     = (*ChargePayment)(nil)
	_ reportedSteps = (*chargeSteps)(nil)
)
