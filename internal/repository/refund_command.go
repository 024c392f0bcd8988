package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// A refund on the shared core (issue 20): its phase 1 and phase 3, each one
// statement composed of the refund's building blocks (refunds.go) and the
// clauses every command shares (command_clauses.go).

// claimAndReserveRefundSQL is a refund's phase 1 in one statement, run as
// claimAndReserveSQL is: @atomic on its own, committing only a claimed key
// with a PENDING refund to make, and raising charge_needs_transaction's
// error (migration 00012: one function for every command's phase 1) for
// any other answer; or in a transaction, returning every answer.
//
// Lock order (docs/adding-a-command.md): the payment (refund_target), then
// the refund row it inserts (reserved), then the key (claimed), whose
// recovery point is the refund (refund_id, migration 00016). The record
// names the refund's payment too (payment_id, migration 00017), so that the
// previous release's jobs never take it for a charge that reserved nothing.
var claimAndReserveRefundSQL = `
WITH` + reserveRefundClauses + `,
` + claimKeyClause(app.CommandRefund, "refund_id", "payment_id") + `,
-- The refund this command goes on with: the one just reserved, or, after a
-- takeover, the recovery point.
refund_row AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT f.* FROM refund f JOIN claimed c ON f.id = c.refund_id
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed,
       EXISTS (SELECT 1 FROM reserved) AS reserved,
       (SELECT refund_id FROM claimed) AS recovery_point,
       (SELECT o.saga_id FROM order_projection o JOIN payment p ON p.order_id = o.order_id
         WHERE p.id = @payment) AS saga_id,
       f.id, f.payment_id, f.client_id, f.payment_provider, f.external_refund_id, f.amount, f.currency, f.status
  FROM (SELECT 1) AS one
  LEFT JOIN refund_row f ON true
-- On its own (atomic), keep only a claimed key with a PENDING refund, which
-- is its recovery point; any other answer raises, and the error rolls back
-- everything above (the refund total's increase too).
 WHERE ` + onlyTheUsualAnswer("f", "refund_id")

// recordRefundOutcomeSQL is a refund's phase 3 in one statement: the key's
// outcome, the refund's final status (a DECLINED or FAILED refund gives its
// amount back to the payment's refund total) and the event, all or none.
// Lock order: the payment first (refund_payment), then the refund
// (refund_locked), then the key (completed, whose guard reads
// refund_locked): a takeover's phase 1 takes the same order, so the old
// owner's phase 3 and a new owner's phase 1 never wait on each other in a
// cycle.
var recordRefundOutcomeSQL = `
WITH` + lockRefundPaymentClause + `,
refund_locked AS MATERIALIZED (
    SELECT id
      FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM refund_payment)
       FOR NO KEY UPDATE
),
` + completeKeyClause("EXISTS (SELECT 1 FROM refund_locked)") + `,
` + settleRefundClauses("EXISTS (SELECT 1 FROM completed)") + `,
` + announceClause("settled") + `
SELECT ` + recordedAndLockHeld + `,
       (SELECT status FROM refund WHERE id = @refund) AS refund_status`

var (
	claimAndReserveRefundStmt = compileNamed(claimAndReserveRefundSQL)
	recordRefundOutcomeStmt   = compileNamed(recordRefundOutcomeSQL)
)

// ClaimAndReserveRefund implements app.Refunds: the statement inside the
// caller's transaction, returning every answer.
func (s *Refunds) ClaimAndReserveRefund(ctx context.Context, c app.RefundClaim) (app.RefundClaimResult, error) {
	return claimAndReserveRefund(ctx, s.db, c, false)
}

func claimAndReserveRefund(ctx context.Context, db *gorm.DB, c app.RefundClaim, atomic bool) (app.RefundClaimResult, error) {
	values := refundValues(c.Scope.ClientID, c.Refund)
	values["atomic"] = atomic
	values["key"] = c.Scope.Key
	values["hash"] = c.CommandHash
	values["token"] = c.Token
	values["lock_micros"] = c.LockFor.Microseconds()
	row, err := queryRow(ctx, db, claimAndReserveRefundStmt, values)
	if err != nil {
		return app.RefundClaimResult{}, err
	}
	var res app.RefundClaimResult
	var recoveryPoint sql.NullInt64
	var ref nullableRefundRow
	err = row.Scan(append([]any{&res.Claimed, &res.Reserved, &recoveryPoint, &res.SagaID}, ref.targets()...)...)
	if err != nil {
		return app.RefundClaimResult{}, mapError(fmt.Errorf("claim key and reserve refund: %w", err))
	}
	// As for a charge: a takeover keeps its own refund, and a reservation
	// beside it would be a second refund for one command.
	if res.Claimed && res.Reserved && recoveryPoint.Int64 != ref.ID.Int64 {
		return app.RefundClaimResult{}, fmt.Errorf("claim key %q: it already has refund %d, and refund %d was reserved too",
			c.Scope.Key, recoveryPoint.Int64, ref.ID.Int64)
	}
	if ref.ID.Valid {
		refund, _, err := ref.toDomain()
		if err != nil {
			return app.RefundClaimResult{}, err
		}
		res.Refund = &refund
	}
	return res, nil
}

// GetRefund implements app.Refunds.
func (s *Refunds) GetRefund(ctx context.Context, id domain.RefundID) (domain.Refund, error) {
	refunds, err := s.list(ctx, "id = ?", int64(id))
	if err != nil {
		return domain.Refund{}, err
	}
	if len(refunds) == 0 {
		return domain.Refund{}, fmt.Errorf("refund %d: no such refund", id)
	}
	return refunds[0], nil
}

// ListRefunds implements app.Refunds.
func (s *Refunds) ListRefunds(ctx context.Context, payment domain.PaymentID) ([]domain.Refund, error) {
	return s.list(ctx, "payment_id = ?", int64(payment))
}

func (s *Refunds) list(ctx context.Context, where string, arg any) ([]domain.Refund, error) {
	var rows []nullableRefundRow
	err := s.db.WithContext(ctx).Table("refund").
		Select("id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status").
		Where(where, arg).Order("id").Scan(&rows).Error
	if err != nil {
		return nil, mapError(fmt.Errorf("read refunds: %w", err))
	}
	refunds := make([]domain.Refund, len(rows))
	for i, row := range rows {
		if refunds[i], _, err = row.toDomain(); err != nil {
			return nil, err
		}
	}
	return refunds, nil
}

// RefundStore implements app.RefundStore: a refund's statements that are
// atomic on their own.
type RefundStore struct {
	atomicStatements
}

// NewRefundStore returns the refund's single-statement store; its
// statements wait their turn at gate, the Transactor's.
func NewRefundStore(db *gorm.DB, outbox OutboxConfig, gate *Gate) *RefundStore {
	return &RefundStore{atomicStatements{db: db, outbox: outbox, gate: gate}}
}

// ClientPayment implements app.RefundStore: one statement on the pool,
// waiting its turn at the gate as every statement does.
func (s *RefundStore) ClientPayment(ctx context.Context, client domain.ClientID, id domain.PaymentID) (domain.Payment, error) {
	if err := s.gate.enter(ctx); err != nil {
		return domain.Payment{}, err
	}
	defer s.gate.leave()
	p, err := (&Payments{db: s.db}).Get(ctx, id)
	if err == nil && p.ClientID != client {
		err = domain.ErrPaymentNotFound
	}
	return p, mapError(err)
}

// ClaimAndReserveRefund implements app.RefundStore.
func (s *RefundStore) ClaimAndReserveRefund(ctx context.Context, c app.RefundClaim) (app.RefundClaimResult, error) {
	return claimOnItsOwn(ctx, s.atomicStatements, func(db *gorm.DB) (app.RefundClaimResult, error) {
		return claimAndReserveRefund(ctx, db, c, true)
	})
}

// RecordRefundOutcome implements app.RefundStore.
func (s *RefundStore) RecordRefundOutcome(ctx context.Context, o app.RefundOutcomeRecord) error {
	ev, err := newRefundOutboxEventRow(ctx, o.Event, s.outbox)
	if err != nil {
		return err
	}
	status, err := s.recordOutcome(ctx, recordRefundOutcomeStmt, o.Scope, o.Token, o.Response, ev, map[string]any{
		"refund": int64(o.Event.Refund.ID),
		"status": string(o.Event.Refund.Status),
	})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record refund %d as %s: it is %s, not PENDING", o.Event.Refund.ID, o.Event.Refund.Status, status)
	}
	return err
}

// refundEventV1 is the value of PaymentRefunded.v1, RefundDeclined.v1 and
// RefundFailed.v1 on the payment events topic: a wire contract like
// paymentEventV1's. Add optional fields only.
type refundEventV1 struct {
	EventID          uuid.UUID `json:"eventId"`
	SagaID           *string   `json:"sagaId,omitempty"`
	EventType        string    `json:"eventType"`
	RefundID         int64     `json:"refundId"`
	PaymentID        int64     `json:"paymentId"`
	OrderID          int64     `json:"orderId"`
	Amount           string    `json:"amount"`
	Currency         string    `json:"currency"`
	PaymentProvider  string    `json:"paymentProvider"`
	ExternalRefundID string    `json:"externalRefundId"`
	OccurredAt       time.Time `json:"occurredAt"`
}

// newRefundOutboxEventRow renders a refund event as its outbox row, keyed
// by the order like the payment's events, so one order's events stay in
// order on one partition.
func newRefundOutboxEventRow(ctx context.Context, e app.RefundEvent, cfg OutboxConfig) (outboxEventRow, error) {
	r := e.Refund
	v := refundEventV1{
		EventID:          e.ID,
		EventType:        e.Type,
		RefundID:         int64(r.ID),
		PaymentID:        int64(r.PaymentID),
		OrderID:          int64(e.OrderID),
		Amount:           r.Amount.AmountString(),
		Currency:         string(r.Amount.Currency()),
		PaymentProvider:  string(r.Provider),
		ExternalRefundID: string(r.ExternalRefundID),
		OccurredAt:       e.OccurredAt.UTC(),
		SagaID:           sagaIDField(e.SagaID),
	}
	return newOutboxRow(ctx, cfg, e.ID, e.Type, int64(e.OrderID), v)
}

var (
	_ app.Refunds     = (*Refunds)(nil)
	_ app.RefundStore = (*RefundStore)(nil)
)
