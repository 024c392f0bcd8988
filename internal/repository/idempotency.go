package repository

import (
	"context"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// IdempotencyRecords implements app.IdempotencyRecords on the
// idempotency_record table (db/migrations/00001_payments_core.sql).
type IdempotencyRecords struct {
	db *gorm.DB
}

type idempotencyRecordRow struct {
	ClientID       string
	IdempotencyKey string
	CommandHash    string
	Command        string
	Status         string
	Response       []byte
	HTTPStatus     *int `gorm:"column:http_status"`
	PaymentID      *int64
	RefundID       *int64
	LockToken      *uuid.UUID
	LockedUntil    *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

func (idempotencyRecordRow) TableName() string { return "idempotency_record" }

func (row idempotencyRecordRow) toApp() app.IdempotencyRecord {
	rec := app.IdempotencyRecord{
		Scope:       app.IdempotencyScope{ClientID: domain.ClientID(row.ClientID), Key: row.IdempotencyKey},
		CommandHash: row.CommandHash,
		Command:     app.CommandName(row.Command),
		Status:      app.RecordStatus(row.Status),
		CreatedAt:   row.CreatedAt,
	}
	if row.HTTPStatus != nil {
		rec.Response = app.StoredResponse{StatusCode: *row.HTTPStatus, Body: row.Response}
	}
	if row.PaymentID != nil {
		id := domain.PaymentID(*row.PaymentID)
		rec.PaymentID = &id
	}
	if row.RefundID != nil {
		id := domain.RefundID(*row.RefundID)
		rec.RefundID = &id
	}
	if row.LockToken != nil {
		rec.LockToken = *row.LockToken
	}
	if row.LockedUntil != nil {
		rec.LockedUntil = *row.LockedUntil
	}
	return rec
}

// Get implements app.IdempotencyRecords. It runs lookupKeySQL in the
// transaction: after the claim statement lost to another request, a new
// statement sees that request's committed record.
func (s *IdempotencyRecords) Get(ctx context.Context, scope app.IdempotencyScope) (app.IdempotencyRecord, bool, error) {
	return lookupKey(ctx, s.db, scope)
}

// SetRecoveryPoint implements app.IdempotencyRecords.
func (s *IdempotencyRecords) SetRecoveryPoint(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, payment domain.PaymentID) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"payment_id": int64(payment),
		"updated_at": gorm.Expr("now()"),
	})
}

// SetRefundRecoveryPoint implements app.IdempotencyRecords. It names the
// refund's payment as well, as the refund's claim does (claimKeyClause's
// paymentLink, migration 00017).
func (s *IdempotencyRecords) SetRefundRecoveryPoint(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, refund domain.RefundID) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"refund_id":  int64(refund),
		"payment_id": gorm.Expr("(SELECT payment_id FROM refund WHERE id = ?)", int64(refund)),
		"updated_at": gorm.Expr("now()"),
	})
}

// Complete implements app.IdempotencyRecords.
func (s *IdempotencyRecords) Complete(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, resp app.StoredResponse) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"status":       string(app.RecordCompleted),
		"response":     gorm.Expr("?::json", string(resp.Body)),
		"http_status":  resp.StatusCode,
		"lock_token":   nil,
		"locked_until": nil,
		"updated_at":   gorm.Expr("now()"),
	})
}

// Release implements app.IdempotencyRecords.
func (s *IdempotencyRecords) Release(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID) error {
	res := s.owned(ctx, scope, token).Delete(&idempotencyRecordRow{})
	return ownedResult(res)
}

// ExpireLock implements app.IdempotencyRecords. The lock ends by the
// database clock, the clock the claim's takeover condition reads, so the
// very next claim for the key can take it over.
func (s *IdempotencyRecords) ExpireLock(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"locked_until": gorm.Expr("clock_timestamp()"),
		"updated_at":   gorm.Expr("now()"),
	})
}

// updateOwned updates the record only while token owns its claim: this is
// the fence that keeps a request whose lock was taken over from writing.
func (s *IdempotencyRecords) updateOwned(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, set map[string]any) error {
	res := s.owned(ctx, scope, token).Model(&idempotencyRecordRow{}).Updates(set)
	return ownedResult(res)
}

func (s *IdempotencyRecords) owned(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID) *gorm.DB {
	return s.db.WithContext(ctx).Where(
		"client_id = ? AND idempotency_key = ? AND status = ? AND lock_token = ?",
		string(scope.ClientID), scope.Key, string(app.RecordInProgress), token)
}

func ownedResult(res *gorm.DB) error {
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return app.ErrLockLost
	}
	return nil
}
