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

// Keys implements app.KeyStore on the idempotency_record table
// (db/migrations/00001_payments_core.sql).
type Keys struct {
	conn
}

// lookupKeySQL is phase 0: a key's record, read with no lock and no
// transaction. A replay of a completed key, a reused key, or a duplicate
// meeting a live lock is answered from this one read and writes nothing.
// Only an absent record, or a claim whose lock has run out, goes on to the
// command's claim.
const lookupKeySQL = `
SELECT command_hash, status, http_status, response::text, payment_id, lock_token, locked_until, created_at
  FROM idempotency_record
 WHERE client_id = @client AND idempotency_key = @key`

var lookupKeyStmt = compileNamed(lookupKeySQL)

// Lookup implements app.KeyStore. Inside a transaction it runs as a new
// statement: after a claim that lost to another request, it sees that
// request's committed record.
func (s *Keys) Lookup(ctx context.Context, scope app.IdempotencyScope) (rec app.IdempotencyRecord, found bool, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		rec, found, err = lookupKey(ctx, db, scope)
		return err
	})
	return rec, found, err
}

func lookupKey(ctx context.Context, db *gorm.DB, scope app.IdempotencyScope) (app.IdempotencyRecord, bool, error) {
	row, err := queryRow(ctx, db, lookupKeyStmt, map[string]any{
		"client": string(scope.ClientID),
		"key":    scope.Key,
	})
	if err != nil {
		return app.IdempotencyRecord{}, false, err
	}
	var (
		rec         = app.IdempotencyRecord{Scope: scope}
		status      string
		httpStatus  sql.NullInt32
		response    sql.NullString
		paymentID   sql.NullInt64
		lockToken   uuid.NullUUID
		lockedUntil sql.NullTime
	)
	err = row.Scan(&rec.CommandHash, &status, &httpStatus, &response, &paymentID, &lockToken, &lockedUntil, &rec.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return app.IdempotencyRecord{}, false, nil
	}
	if err != nil {
		return app.IdempotencyRecord{}, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	rec.Status = app.RecordStatus(status)
	if httpStatus.Valid {
		rec.Response = app.StoredResponse{StatusCode: int(httpStatus.Int32), Body: []byte(response.String)}
	}
	if paymentID.Valid {
		id := domain.PaymentID(paymentID.Int64)
		rec.PaymentID = &id
	}
	rec.LockToken = lockToken.UUID
	rec.LockedUntil = lockedUntil.Time
	return rec, true, nil
}

func (s *Keys) Complete(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, resp app.StoredResponse) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"status":       string(app.RecordCompleted),
		"response":     gorm.Expr("?::json", string(resp.Body)),
		"http_status":  resp.StatusCode,
		"lock_token":   nil,
		"locked_until": nil,
		"updated_at":   gorm.Expr("now()"),
	})
}

// ExpireLock implements app.KeyStore. The lock ends by the database clock,
// the clock the claim's takeover condition reads, so the very next claim
// for the key can take it over.
func (s *Keys) ExpireLock(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"locked_until": gorm.Expr("clock_timestamp()"),
		"updated_at":   gorm.Expr("now()"),
	})
}

// updateOwned updates the record only while token owns its claim: the
// fence that keeps a request whose lock was taken over from writing.
func (c conn) updateOwned(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, set map[string]any) error {
	return c.run(ctx, func(db *gorm.DB) error {
		res := db.WithContext(ctx).Model(&idempotencyRecordRow{}).Where(
			"client_id = ? AND idempotency_key = ? AND status = ? AND lock_token = ?",
			string(scope.ClientID), scope.Key, string(app.RecordInProgress), token).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return app.ErrLockLost
		}
		return nil
	})
}

// idempotencyRecordRow is a record read whole, for the jobs.
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

var _ app.KeyStore = (*Keys)(nil)
