package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/example/payment-service/internal/domain"
)

// OperationRefundPayment is the Operation of a RefundCommand made through
// POST /payments/{id}/refunds. It is part of the command hash, so the
// completer must use the very string the HTTP adapter uses.
const OperationRefundPayment = "POST /payments/{id}/refunds"

// CommandRefund is the name of a RefundCommand's records; the refund's
// claim statement writes it as the literal 'refund' (internal/repository).
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

// RefundPayment refunds part or all of a payment through the provider that
// charged it, exactly once per idempotency key and per external refund,
// and never beyond the payment's amount under any concurrency.
//
// It runs on the core every money-moving command shares (IdempotentCommand);
// what is the refund's own is refundSteps:
//
//   - before the core, the payment is read: unknown or another client's is
//     domain.ErrPaymentNotFound, not SUCCEEDED ErrPaymentNotRefundable,
//     neither stored (the command needs the payment's currency and provider,
//     which the request does not carry);
//   - its reservation is a PENDING refund, reserved against the payment's
//     refund total (migration 00015) in the claim's own statement and linked
//     to the key as its recovery point (refund_id, migration 00016);
//   - the claim's rare answers: a refund over what the payment has left
//     (ErrRefundExceedsPayment, rolled back, not stored) and the second layer
//     (the external refund is recorded: the same refund gets it, another
//     refund a stored conflict);
//   - the provider call is RefundProvider.Refund with the refund's provider
//     key, and the lookup LookupRefund;
//   - the record sets the refund's final status (a DECLINED or FAILED refund
//     gives its amount back), completes the key and appends its
//     PaymentRefunded/RefundDeclined/RefundFailed event, in one statement.
type RefundPayment struct {
	tx  Transactor
	run *IdempotentCommand[RefundCommand, refundReservation]
}

// NewRefundPayment builds the use case on core, the charge's: one drain
// for both.
func NewRefundPayment(core *Core, store RefundStore, provider RefundProvider, encoder RefundResponseEncoder) *RefundPayment {
	return &RefundPayment{tx: core.tx, run: NewIdempotentCommand(core, &refundSteps{
		store: store, provider: provider, encoder: encoder,
	})}
}

// Handle runs the command. Errors are domain.ErrPaymentNotFound,
// ErrPaymentNotRefundable, ErrRefundExceedsPayment, and the core's
// (IdempotentCommand.Handle).
func (uc *RefundPayment) Handle(ctx context.Context, cmd RefundCommand) (CommandResult, error) {
	return uc.run.Handle(ctx, cmd)
}

// Resume implements Resumable: the completer's retry of an abandoned
// refund, rebuilt from its PENDING refund row.
func (uc *RefundPayment) Resume(ctx context.Context, rec IdempotencyRecord) error {
	if rec.RefundID == nil {
		return ErrNothingReserved
	}
	var refund domain.Refund
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		refund, err = r.Refunds.GetRefund(ctx, *rec.RefundID)
		return err
	})
	if err != nil {
		return fmt.Errorf("read refund %d: %w", *rec.RefundID, err)
	}
	cmd := RefundCommand{Scope: rec.Scope, PaymentID: refund.PaymentID, Amount: refund.Amount.Amount(),
		ExternalRefundID: refund.ExternalRefundID, Operation: OperationRefundPayment}
	if err := uc.run.rebuilt(rec, cmd); err != nil {
		return fmt.Errorf("refund %d: %w", refund.ID, err)
	}
	_, err = uc.Handle(ctx, cmd)
	return err
}

var _ Resumable = (*RefundPayment)(nil)

// ListRefunds lists the refunds of one of the client's payments.
type ListRefunds struct {
	tx Transactor
}

// NewListRefunds builds the query.
func NewListRefunds(tx Transactor) *ListRefunds { return &ListRefunds{tx: tx} }

// Handle returns the payment's refunds, oldest first; domain.ErrPaymentNotFound
// for a payment that does not exist or is another client's.
func (uc *ListRefunds) Handle(ctx context.Context, client domain.ClientID, id domain.PaymentID) ([]domain.Refund, error) {
	var refunds []domain.Refund
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) error {
		if _, err := clientPayment(ctx, r, client, id); err != nil {
			return err
		}
		var err error
		refunds, err = r.Refunds.ListRefunds(ctx, id)
		return err
	})
	return refunds, err
}

// clientPayment reads payment id if it is client's, and otherwise answers
// domain.ErrPaymentNotFound, so a client cannot probe for other clients'
// payments.
func clientPayment(ctx context.Context, r Repos, client domain.ClientID, id domain.PaymentID) (domain.Payment, error) {
	p, err := r.Payments.Get(ctx, id)
	if err == nil && p.ClientID != client {
		err = domain.ErrPaymentNotFound
	}
	return p, err
}

// refundReservation is the refund's recovery point: the PENDING refund,
// with what its call and its event need of the payment.
type refundReservation struct {
	refund    domain.Refund
	chargeKey string // the payment's provider key: how the provider knows the charge
	orderID   domain.OrderID
	saga      uuid.NullUUID
}

// refundSteps are the refund's own parts of the core's protocol.
type refundSteps struct {
	store    RefundStore
	provider RefundProvider
	encoder  RefundResponseEncoder
}

var (
	_ CommandSteps[RefundCommand, refundReservation] = (*refundSteps)(nil)
	_ reportedSteps                                  = (*refundSteps)(nil)
)

// Name implements CommandSteps.
func (*refundSteps) Name() string { return "refund" }

// Key implements CommandSteps.
func (*refundSteps) Key(cmd RefundCommand) (IdempotencyScope, string) { return cmd.Scope, cmd.Hash() }

// SpanAttributes implements CommandSteps.
func (*refundSteps) SpanAttributes(cmd RefundCommand) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.Int64("refund.payment_id", int64(cmd.PaymentID))}
}

// LogAttrs implements CommandSteps.
func (*refundSteps) LogAttrs(t refundReservation) []any {
	return []any{"refund_id", t.refund.ID, "payment_id", t.refund.PaymentID}
}

// readPayment reads the payment the command refunds, for what the request
// does not carry (the currency and the provider): one statement of its
// own, without a transaction around it, whose BEGIN and COMMIT would be
// two more round trips (TestRefundRoundTrips). A SUCCEEDED payment never
// changes again, so the read cannot go stale before the claim.
func (s *refundSteps) readPayment(ctx context.Context, cmd RefundCommand) (domain.Payment, error) {
	return s.store.ClientPayment(ctx, cmd.Scope.ClientID, cmd.PaymentID)
}

// refundClaim is phase 1's input: the command checked against its payment.
func refundClaim(cmd RefundCommand, k KeyClaim, p domain.Payment) (RefundClaim, error) {
	if p.Status != domain.PaymentSucceeded {
		return RefundClaim{}, ErrPaymentNotRefundable
	}
	if cmd.Amount.GreaterThan(p.Charge.Amount.Amount()) {
		return RefundClaim{}, ErrRefundExceedsPayment
	}
	amount, err := domain.NewMoney(cmd.Amount, p.Charge.Amount.Currency())
	if err != nil {
		return RefundClaim{}, err
	}
	refund, err := domain.NewRefund(p, amount, cmd.ExternalRefundID)
	if err != nil {
		return RefundClaim{}, err
	}
	return RefundClaim{KeyClaim: k, Refund: refund}, nil
}

// ClaimAtOnce implements CommandSteps: phase 1 in one round trip, which
// commits only a claimed key with a PENDING refund to make.
func (s *refundSteps) ClaimAtOnce(ctx context.Context, cmd RefundCommand, k KeyClaim) (Claimed[refundReservation], error) {
	p, err := s.readPayment(ctx, cmd)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	c, err := refundClaim(cmd, k, p)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	res, err := s.store.ClaimAndReserveRefund(ctx, c)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	if !res.Claimed || res.Refund == nil {
		return Claimed[refundReservation]{}, fmt.Errorf("phase 1 committed without a refund to make (claimed %v)", res.Claimed)
	}
	return refundReserved(p, *res.Refund, res.SagaID, !res.Reserved), nil
}

// Claim implements CommandSteps: phase 1 inside the core's transaction,
// for the answers ClaimAtOnce does not commit.
func (s *refundSteps) Claim(ctx context.Context, r Repos, cmd RefundCommand, k KeyClaim) (Claimed[refundReservation], error) {
	// In the transaction's own connection: a second one from the pool
	// while this one is held could wait on itself.
	p, err := clientPayment(ctx, r, cmd.Scope.ClientID, cmd.PaymentID)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	c, err := refundClaim(cmd, k, p)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	res, err := r.Refunds.ClaimAndReserveRefund(ctx, c)
	switch {
	case err != nil:
		return Claimed[refundReservation]{}, err
	case !res.Claimed:
		return Claimed[refundReservation]{KeyHeld: true}, nil
	case res.Refund != nil && !res.Refund.Status.Final():
		return refundReserved(p, *res.Refund, res.SagaID, !res.Reserved), nil
	case res.Refund != nil:
		// A final refund under a claim still in progress: only after a
		// manual repair (phase 3 is one statement). Record what it says,
		// without a second event.
		return s.completeWith(ctx, r, k, *res.Refund, RefundOutcomeRefunded)
	}
	// Claimed, and nothing reserved: ReserveRefund says why (or reserves,
	// if what stood in the way has gone since).
	in, err := r.Refunds.ReserveRefund(ctx, cmd.Scope.ClientID, c.Refund)
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	switch in.Kind {
	case RefundReserved:
		return refundReserved(p, in.Refund, res.SagaID, false), r.Idempotency.SetRefundRecoveryPoint(ctx, k.Scope, k.Token, in.Refund.ID)
	case RefundPaymentNotFound:
		return Claimed[refundReservation]{}, domain.ErrPaymentNotFound
	case RefundPaymentNotRefundable:
		return Claimed[refundReservation]{}, ErrPaymentNotRefundable
	case RefundOverTheAmount:
		// Rolled back, not stored: a PENDING refund that counts now may be
		// declined, and then this very refund fits.
		return Claimed[refundReservation]{}, ErrRefundExceedsPayment
	case RefundExternalRefundExists:
		return s.secondLayer(ctx, r, cmd, k, c.Refund, in)
	default:
		return Claimed[refundReservation]{}, fmt.Errorf("reserve refund: unknown reservation kind %s", in.Kind)
	}
}

// refundReserved is a claim with a refund to make.
func refundReserved(p domain.Payment, refund domain.Refund, saga uuid.NullUUID, resumed bool) Claimed[refundReservation] {
	return Claimed[refundReservation]{Reservation: refundReservation{
		refund: refund, chargeKey: p.Charge.ProviderIdempotencyKey(), orderID: p.Charge.OrderID, saga: saga,
	}, Resumed: resumed}
}

// secondLayer answers a new key for an external refund that is already
// recorded (R-DIST-IDEM-4 for refunds): the same refund of the same client
// gets it, anything else a conflict; neither reaches the provider.
func (s *refundSteps) secondLayer(ctx context.Context, r Repos, cmd RefundCommand, k KeyClaim, want domain.Refund, in RefundReservation) (Claimed[refundReservation], error) {
	if in.ClientID != cmd.Scope.ClientID || !in.Refund.IsSameRefund(want) {
		return s.completeWith(ctx, r, k, domain.Refund{}, RefundOutcomeExternalRefundConflict)
	}
	if !in.Refund.Status.Final() {
		// The same refund is being made right now under another key.
		return Claimed[refundReservation]{}, &InProgressError{RetryAfter: inProgressRetryAfter}
	}
	return s.completeWith(ctx, r, k, in.Refund, RefundOutcomeAlreadyRecorded)
}

// completeWith stores an answer that needs no provider call, in phase 1's
// transaction. A declined or failed refund is shown as such.
func (s *refundSteps) completeWith(ctx context.Context, r Repos, k KeyClaim, refund domain.Refund, kind RefundOutcomeKind) (Claimed[refundReservation], error) {
	switch refund.Status {
	case domain.RefundDeclined:
		kind = RefundOutcomeDeclined
	case domain.RefundFailed:
		kind = RefundOutcomeFailed
	}
	resp, err := s.encoder.EncodeRefundOutcome(RefundOutcome{Kind: kind, Refund: refund})
	if err != nil {
		return Claimed[refundReservation]{}, err
	}
	return Claimed[refundReservation]{Response: &resp}, r.Idempotency.Complete(ctx, k.Scope, k.Token, resp)
}

// Call implements CommandSteps: phase 2, the refund at the provider.
func (s *refundSteps) Call(ctx context.Context, t refundReservation) (ProviderDecision, error) {
	return s.provider.Refund(ctx, ProviderRefund{
		IdempotencyKey: t.refund.ProviderIdempotencyKey(),
		ChargeKey:      t.chargeKey,
		Refund:         t.refund,
	})
}

// Lookup implements CommandSteps: what the provider holds under the
// refund's provider key.
func (s *refundSteps) Lookup(ctx context.Context, t refundReservation) (ProviderDecision, error) {
	return s.provider.LookupRefund(ctx, t.refund.ProviderIdempotencyKey())
}

// refundOutcomes are the answer each settlement of a new refund records.
var refundOutcomes = map[Settlement]RefundOutcomeKind{
	SettledApproved: RefundOutcomeRefunded,
	SettledDeclined: RefundOutcomeDeclined,
	SettledFailed:   RefundOutcomeFailed,
}

// Record implements CommandSteps: phase 3, the refund's final status (its
// amount given back unless SUCCEEDED), the stored response and the outbox
// event, in one statement fenced by the lock token. As for the charge,
// exactly one event per refund outcome: only this statement appends one,
// and only for the claim that still owns the refund's record.
func (s *refundSteps) Record(ctx context.Context, k KeyClaim, t refundReservation, settled Settlement) (StoredResponse, error) {
	return s.record(ctx, s.store, k, t, settled)
}

// Reported implements reportedSteps: the refund an event's provider key
// names, recorded, if it is PENDING, by Record's statement in r's
// transaction.
func (s *refundSteps) Reported(ctx context.Context, r Repos, ev ProviderEvent) (reported, bool, error) {
	return reportedBy(ctx, ev, domain.ExternalRefundOfProviderKey, r.ProviderReports.Refund, func(rep ReportedRefund) reported {
		t := refundReserved(rep.Payment, rep.Refund, rep.Saga, true).Reservation
		return reported{status: rep.Refund.Status, amount: rep.Refund.Amount, claim: rep.Claim,
			record: func(ctx context.Context, k KeyClaim, settled Settlement) error {
				_, err := s.record(ctx, r.RefundStatements, k, t, settled)
				return err
			}}
	})
}

// record is phase 3 through store: the pool's, or a transaction's.
func (s *refundSteps) record(ctx context.Context, store RefundStore, k KeyClaim, t refundReservation, settled Settlement) (StoredResponse, error) {
	refund := t.refund
	refund.Status = settled.Status()
	resp, err := s.encoder.EncodeRefundOutcome(RefundOutcome{Kind: refundOutcomes[settled], Refund: refund})
	if err != nil {
		return StoredResponse{}, err
	}
	event, err := NewRefundEvent(refund, t.orderID, t.saga, time.Now())
	if err != nil {
		return StoredResponse{}, err
	}
	err = store.RecordRefundOutcome(ctx, RefundOutcomeRecord{Scope: k.Scope, Token: k.Token, Response: resp, Event: event})
	return resp, err
}

// LockParents implements CommandSteps: the refund's claim locks its
// payment (whose refund total it raises) before the key, so its release
// does too.
func (s *refundSteps) LockParents(ctx context.Context, r Repos, t refundReservation) error {
	return r.Refunds.LockRefundPayment(ctx, t.refund.ID)
}

// GiveBack implements CommandSteps: the PENDING refund goes with the
// released key, and its amount stops counting, since the provider did not
// act on it.
func (s *refundSteps) GiveBack(ctx context.Context, r Repos, t refundReservation) error {
	return r.Refunds.ReleaseRefund(ctx, t.refund.ID)
}
