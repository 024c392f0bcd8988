package repository

import (
	"context"
	"fmt"
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
	Status         string
	Response       []byte
	HTTPStatus     *int `gorm:"column:http_status"`
	PaymentID      *int64
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
	if row.LockToken != nil {
		rec.LockToken = *row.LockToken
	}
	if row.LockedUntil != nil {
		rec.LockedUntil = *row.LockedUntil
	}
	return rec
}

// claimSQL is the whole claim in one statement, so two requests with the
// same key can never both win: PostgreSQL's unique index decides, and the
// loser waits for the winner's transaction instead of reading a stale
// "absent" (the find-then-save race of the style guide's sample code).
//
// The DO UPDATE branch is the crash takeover: it fires only for a record
// that is still IN_PROGRESS, for the same command, with an expired lock.
// Then the claim gets a new lock_token, which fences the old owner out.
// When neither branch applies, RETURNING yields no row.
const claimSQL = `
INSERT INTO idempotency_record AS r
       (client_id, idempotency_key, command_hash, status, lock_token, locked_until)
VALUES (?, ?, ?, 'IN_PROGRESS', ?, clock_timestamp() + ? * interval '1 microsecond')
ON CONFLICT (client_id, idempotency_key) DO UPDATE
   SET lock_token = EXCLUDED.lock_token,
       locked_until = EXCLUDED.locked_until,
       updated_at = now()
 WHERE r.status = 'IN_PROGRESS'
   AND r.locked_until < clock_timestamp()
   AND r.command_hash = EXCLUDED.command_hash
RETURNING r.*`

// Claim implements app.IdempotencyRecords.
func (s *IdempotencyRecords) Claim(ctx context.Context, c app.Claim) (app.IdempotencyRecord, bool, error) {
	// A record can vanish between the claim and the read (the TTL cleanup);
	// then the claim is simply tried again.
	for range 3 {
		var claimed []idempotencyRecordRow
		err := s.db.WithContext(ctx).Raw(claimSQL,
			string(c.Scope.ClientID), c.Scope.Key, c.CommandHash, c.Token, c.LockFor.Microseconds(),
		).Scan(&claimed).Error
		if err != nil {
			return app.IdempotencyRecord{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
		if len(claimed) == 1 {
			return claimed[0].toApp(), true, nil
		}
		var existing []idempotencyRecordRow
		err = s.db.WithContext(ctx).
			Where("client_id = ? AND idempotency_key = ?", string(c.Scope.ClientID), c.Scope.Key).
			Limit(1).Find(&existing).Error
		if err != nil {
			return app.IdempotencyRecord{}, false, fmt.Errorf("read idempotency record: %w", err)
		}
		if len(existing) == 1 {
			return existing[0].toApp(), false, nil
		}
	}
	return app.IdempotencyRecord{}, false, fmt.Errorf("claim idempotency key: record kept disappearing")
}

// SetRecoveryPoint implements app.IdempotencyRecords.
func (s *IdempotencyRecords) SetRecoveryPoint(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, payment domain.PaymentID) error {
	return s.updateOwned(ctx, scope, token, map[string]any{
		"payment_id": int64(payment),
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
