package repository

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Refunds runs a refund's clauses alone, without a key, so that the tests
// prove what each clause does on its own (testdata/*.sql); the service's
// phases have the same clauses (statements/refund_*.sql), kept the same by
// TestSharedClausesAreTheSame.
type Refunds struct {
	db *gorm.DB
}

// NewRefunds returns the refund's clauses alone over db.
func NewRefunds(db *gorm.DB) *Refunds { return &Refunds{db: db} }

// InTransaction returns the repositories over tx, a transaction the test
// holds open, as Transactor.Transact hands them to its callback.
func InTransaction(tx *gorm.DB) app.Repos {
	return repos(conn{db: tx, outbox: OutboxConfig{PaymentEventsTopic: DefaultPaymentEventsTopic}, inTx: true})
}

// ReservePayment runs phase 1's rare-path reservation of a charge alone,
// without a key.
func ReservePayment(ctx context.Context, db *gorm.DB, client domain.ClientID, c domain.Charge) (app.ChargeReservation, error) {
	return reserve(ctx, db, client, c)
}

// ReserveRefund runs reserveRefundSQL.
func (s *Refunds) ReserveRefund(ctx context.Context, client domain.ClientID, r domain.Refund) (app.RefundReservation, error) {
	return reserveRefund(ctx, s.db, client, r)
}

// settleRefundSQL sets a PENDING refund's final status and, for DECLINED
// or FAILED, gives its amount back, in one statement: refund_record.sql's
// settling clause without the key, which the tests run on its own.
//
//go:embed testdata/refund_settle_alone.sql
var settleRefundSQL string

// releaseRefundAloneSQL gives a PENDING refund's reservation back when the
// provider did not act on it, without the key.
//
//go:embed testdata/refund_release_alone.sql
var releaseRefundAloneSQL string

var (
	settleRefundStmt       = compileNamed(settleRefundSQL)
	releaseRefundAloneStmt = compileNamed(releaseRefundAloneSQL)
)

// SettleRefund records the provider's final decision on a PENDING refund
// (see settleRefundSQL). It returns an error, and changes nothing, if the
// refund is not PENDING or status is not final.
func (s *Refunds) SettleRefund(ctx context.Context, id domain.RefundID, status domain.RefundStatus) error {
	if !status.Final() {
		return fmt.Errorf("settle refund %d: %s is not a final status", id, status)
	}
	return s.onPending(ctx, settleRefundStmt, "settle refund", id, map[string]any{"refund": int64(id), "status": string(status)})
}

// ReleaseRefund deletes a PENDING refund and gives its amount back
// (releaseRefundAloneSQL): the release's refund clauses without the key.
func (s *Refunds) ReleaseRefund(ctx context.Context, id domain.RefundID) error {
	return s.onPending(ctx, releaseRefundAloneStmt, "release refund", id, map[string]any{"refund": int64(id)})
}

// onPending runs a statement that acts on PENDING refund id only, and
// answers done and the refund's status before it.
func (s *Refunds) onPending(ctx context.Context, q namedSQL, what string, id domain.RefundID, values map[string]any) error {
	row, err := queryRow(ctx, s.db, q, values)
	if err != nil {
		return err
	}
	var done bool
	var before sql.NullString
	if err := row.Scan(&done, &before); err != nil {
		return mapError(fmt.Errorf("%s %d: %w", what, id, err))
	}
	switch {
	case done:
		return nil
	case !before.Valid:
		return fmt.Errorf("%s %d: no such refund", what, id)
	default:
		return fmt.Errorf("%s %d: it is %s, not PENDING", what, id, before.String)
	}
}
