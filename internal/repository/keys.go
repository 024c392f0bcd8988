package repository

import (
	"context"
	"database/sql"
	_ "embed"
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

// lookupKeySQL is phase 0 of every command: a key's record, read with no
// lock and no transaction.
//
//go:embed statements/key_lookup.sql
var lookupKeySQL string

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
	var r recordRow
	err = row.Scan(r.targets()...)
	if errors.Is(err, sql.ErrNoRows) {
		return app.IdempotencyRecord{}, false, nil
	}
	if err != nil {
		return app.IdempotencyRecord{}, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	rec, _ := r.toApp(scope)
	return rec, true, nil
}

// recordRow scans lookupKeySQL's columns, which a charge's claim answers
// too (its clause standing_answers); all NULL when the claim found no
// record in its way.
type recordRow struct {
	hash, status, response sql.NullString
	httpStatus             sql.NullInt32
	recoveryPoint          sql.NullInt64
	lockToken              uuid.NullUUID
	lockedUntil, createdAt sql.NullTime
}

func (r *recordRow) targets() []any {
	return []any{&r.hash, &r.status, &r.httpStatus, &r.response, &r.recoveryPoint, &r.lockToken, &r.lockedUntil, &r.createdAt}
}

// toApp is the record of scope, and false when there was none.
func (r *recordRow) toApp(scope app.IdempotencyScope) (app.IdempotencyRecord, bool) {
	if !r.status.Valid {
		return app.IdempotencyRecord{}, false
	}
	rec := app.IdempotencyRecord{Scope: scope, CommandHash: r.hash.String, Status: app.RecordStatus(r.status.String),
		LockToken: r.lockToken.UUID, LockedUntil: r.lockedUntil.Time, CreatedAt: r.createdAt.Time}
	if r.httpStatus.Valid {
		rec.Response = app.StoredResponse{StatusCode: int(r.httpStatus.Int32), Body: []byte(r.response.String)}
	}
	if r.recoveryPoint.Valid {
		rec.RecoveryPoint = &r.recoveryPoint.Int64
	}
	return rec, true
}

// standing is the record a claim's statement found in its way
// (its clause standing_answers), nil when none stood.
func (r *recordRow) standing(scope app.IdempotencyScope) *app.IdempotencyRecord {
	rec, found := r.toApp(scope)
	if !found {
		return nil
	}
	return &rec
}

// completeKeySQL stores an answer that needs no provider call under a
// claimed key, fenced by the lock token, with its message if it has one.
//
//go:embed statements/key_complete.sql
var completeKeySQL string

// answerKeySQL stores an answer, with its message if it has one, under a
// key that holds no record.
//
//go:embed statements/key_answer.sql
var answerKeySQL string

var (
	completeKeyStmt = compileNamed(completeKeySQL)
	answerKeyStmt   = compileNamed(answerKeySQL)
)

// Complete implements app.KeyStore: completeKeySQL.
func (s *Keys) Complete(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID, resp app.StoredResponse) error {
	values, err := s.responseValues(ctx, scope, resp)
	if err != nil {
		return err
	}
	values["token"] = token
	completed, err := s.answerWith(ctx, completeKeyStmt, resp, values)
	if err == nil && !completed {
		return app.ErrLockLost
	}
	return err
}

// Answer implements app.KeyStore: answerKeySQL.
func (s *Keys) Answer(ctx context.Context, scope app.IdempotencyScope, command app.CommandName, hash string, resp app.StoredResponse) (bool, error) {
	values, err := s.responseValues(ctx, scope, resp)
	if err != nil {
		return false, err
	}
	values["command"] = string(command)
	values["hash"] = hash
	return s.answerWith(ctx, answerKeyStmt, resp, values)
}

// answerWith runs q, which stores resp and answers whether it did.
func (s *Keys) answerWith(ctx context.Context, q namedSQL, resp app.StoredResponse, values map[string]any) (stored bool, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, q, values)
		if err != nil {
			return err
		}
		return row.Scan(&stored)
	})
	if err != nil {
		return false, fmt.Errorf("store the key's answer: %w", err)
	}
	if stored && resp.Publish != nil {
		s.outbox.wrote()
	}
	return stored, nil
}

// responseValues are the parameters of a statement that stores resp as
// scope's answer, its message's included (the clause replied).
func (c conn) responseValues(ctx context.Context, scope app.IdempotencyScope, resp app.StoredResponse) (map[string]any, error) {
	traceContext, err := traceContextJSON(ctx)
	if err != nil {
		return nil, err
	}
	values := map[string]any{
		"client":        string(scope.ClientID),
		"key":           scope.Key,
		"response":      string(resp.Body),
		"http_status":   resp.StatusCode,
		"trace_context": ptrString(traceContext),
	}
	c.replyValues(values, resp)
	return values, nil
}

// replyValues are the parameters of the clause replied: resp's message,
// if it has one.
func (c conn) replyValues(values map[string]any, resp app.StoredResponse) {
	pub := resp.Publish
	values["reply"] = pub != nil
	if pub == nil {
		pub = &app.Publication{}
	}
	values["reply_event_id"] = pub.EventID
	values["reply_topic"] = c.outbox.RepliesTopic
	values["reply_key"] = pub.Key
	values["reply_type"] = pub.EventType
}

// ExpireLock implements app.KeyStore: expireLockSQL.
func (s *Keys) ExpireLock(ctx context.Context, scope app.IdempotencyScope, token uuid.UUID) error {
	return s.updateOwned(ctx, app.KeyClaim{Scope: scope, Token: token}, expireLockStmt, map[string]any{})
}

// The statements that update a claimed record, each only while the
// claim's token owns it: the fence that keeps a request whose lock was
// taken over from writing.
var (
	// expireLockSQL ends a claim's lock now.
	//
	//go:embed statements/key_expire_lock.sql
	expireLockSQL string
	// setPaymentRecoveryPointSQL and setRefundRecoveryPointSQL make the
	// reservation of phase 1's rare path the claim's recovery point.
	//
	//go:embed statements/charge_reserve_recovery_point.sql
	setPaymentRecoveryPointSQL string
	//go:embed statements/refund_reserve_recovery_point.sql
	setRefundRecoveryPointSQL string
)

var (
	expireLockStmt              = compileNamed(expireLockSQL)
	setPaymentRecoveryPointStmt = compileNamed(setPaymentRecoveryPointSQL)
	setRefundRecoveryPointStmt  = compileNamed(setRefundRecoveryPointSQL)
)

// updateOwned runs q, one of the statements above, with values and the
// key's: app.ErrLockLost when the token no longer owns the claim.
func (c conn) updateOwned(ctx context.Context, k app.KeyClaim, q namedSQL, values map[string]any) error {
	values["client"] = string(k.Scope.ClientID)
	values["key"] = k.Scope.Key
	values["token"] = k.Token
	return c.run(ctx, func(db *gorm.DB) error {
		updated, err := exec(ctx, db, q, values)
		if err != nil {
			return err
		}
		if updated == 0 {
			return app.ErrLockLost
		}
		return nil
	})
}

// idempotencyRecordRow is a record read whole, for the jobs
// (listAbandonedSQL).
type idempotencyRecordRow struct {
	ClientID, IdempotencyKey, CommandHash, Command, Status string
	Response                                               []byte
	HTTPStatus                                             sql.NullInt32
	RecoveryPoint                                          sql.NullInt64
	LockToken                                              uuid.NullUUID
	LockedUntil                                            sql.NullTime
	CreatedAt                                              time.Time
}

// targets are the row's fields in the order listAbandonedSQL selects them.
func (row *idempotencyRecordRow) targets() []any {
	return []any{&row.ClientID, &row.IdempotencyKey, &row.CommandHash, &row.Command, &row.Status, &row.Response, &row.HTTPStatus,
		&row.RecoveryPoint, &row.LockToken, &row.LockedUntil, &row.CreatedAt}
}

func (row idempotencyRecordRow) toApp() app.IdempotencyRecord {
	rec := app.IdempotencyRecord{
		Scope:       app.IdempotencyScope{ClientID: domain.ClientID(row.ClientID), Key: row.IdempotencyKey},
		CommandHash: row.CommandHash,
		Command:     app.CommandName(row.Command),
		Status:      app.RecordStatus(row.Status),
		LockToken:   row.LockToken.UUID,
		LockedUntil: row.LockedUntil.Time,
		CreatedAt:   row.CreatedAt,
	}
	if row.HTTPStatus.Valid {
		rec.Response = app.StoredResponse{StatusCode: int(row.HTTPStatus.Int32), Body: row.Response}
	}
	if row.RecoveryPoint.Valid {
		rec.RecoveryPoint = &row.RecoveryPoint.Int64
	}
	return rec
}

var _ app.KeyStore = (*Keys)(nil)

// The key's clauses (its claim, phase 1's usual-answer guard, its fenced
// completion and release, the outbox row) are written out whole in every
// statement that has them, in statements/, so that a phase stays one
// statement and one round trip and reads top to bottom where it runs;
// TestSharedClausesAreTheSame keeps the copies the same. Here is the Go
// that runs phase 3 (recordOutcome) and the release (releaseKey) of every
// command.

// lockStillHeldSQL asks the record's lock_held clause again, in a snapshot
// of its own: see recordOutcome.
//
//go:embed statements/key_lock_still_held.sql
var lockStillHeldSQL string

var lockStillHeldStmt = compileNamed(lockStillHeldSQL)

// releaseKey runs a command's release statement q, which answers whether
// the clause "released" deleted the claim: app.ErrLockLost when it did not.
func (c conn) releaseKey(ctx context.Context, q namedSQL, k app.KeyClaim, values map[string]any) error {
	values["client"] = string(k.Scope.ClientID)
	values["key"] = k.Scope.Key
	values["token"] = k.Token
	return c.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, q, values)
		if err != nil {
			return err
		}
		var released bool
		if err := row.Scan(&released); err != nil {
			return fmt.Errorf("release the key: %w", err)
		}
		if !released {
			return app.ErrLockLost
		}
		return nil
	})
}

// claimValues are the key's parameters of a claim statement; atomic: on
// the pool, keeping only the usual answer.
func (c conn) claimValues(k app.KeyClaim, values map[string]any) map[string]any {
	values["atomic"] = !c.inTx
	values["client"] = string(k.Scope.ClientID)
	values["key"] = k.Scope.Key
	values["hash"] = k.CommandHash
	values["token"] = k.Token
	values["lock_micros"] = k.LockFor.Microseconds()
	return values
}

// errNotPending: phase 3 wrote nothing although its token owns the key, because
// the reservation is no longer PENDING.
var errNotPending = errors.New("the reservation is not PENDING")

// recordOutcome runs a command's phase 3 statement q, made of the clause
// completed, the command's own settling and the clause announced, and
// answering recorded, lock_held and the reservation's status (as
// statements/charge_record.sql does). values are the
// command's own parameters; the key's, the response's and the event row's
// are added here. It returns nil when everything was written (and tells
// the outbox's waker, OutboxConfig.wrote), app.ErrLockLost when the token
// no longer owns the key, and errNotPending with the reservation's status
// otherwise.
func (c conn) recordOutcome(ctx context.Context, q namedSQL, scope app.IdempotencyScope, token uuid.UUID,
	resp app.StoredResponse, ev outboxEventRow, values map[string]any) (string, error) {
	ev.addTo(values)
	status, err := c.recordFenced(ctx, q, scope, token, resp, values)
	if err == nil {
		c.outbox.wrote()
	}
	return status, err
}

// recordFenced runs a statement q that completes the key with resp,
// fenced by token, and writes what hangs on that completion, answering
// recorded, lock_held and the reservation's status: phase 3
// (recordOutcome), or the receipt of a modification the provider
// received (statements/transition_receive.sql). It returns nil when
// everything was written, app.ErrLockLost when the token no longer owns
// the key, and errNotPending with the reservation's status otherwise.
func (c conn) recordFenced(ctx context.Context, q namedSQL, scope app.IdempotencyScope, token uuid.UUID,
	resp app.StoredResponse, values map[string]any) (string, error) {
	if err := c.gate.enter(ctx); err != nil {
		return "", err
	}
	defer c.gate.leave()
	db := c.db
	values["client"] = string(scope.ClientID)
	values["key"] = scope.Key
	values["token"] = token
	values["response"] = string(resp.Body)
	values["http_status"] = resp.StatusCode
	c.replyValues(values, resp)
	row, err := queryRow(ctx, db, q, values)
	if err != nil {
		return "", err
	}
	var recorded, lockHeld bool
	var status sql.NullString
	if err := row.Scan(&recorded, &lockHeld, &status); err != nil {
		return "", mapError(fmt.Errorf("record the outcome: %w", err))
	}
	if !recorded && lockHeld {
		// The statement's snapshot is taken before it waits for its first
		// lock (a refund's payment). A takeover that claimed the key and
		// committed meanwhile makes the fenced completion match nothing,
		// yet that snapshot still shows the old token: a new statement's
		// does not (TestRefundPhasesTakeLocksInOneOrder).
		if lockHeld, err = lockStillHeld(ctx, db, values); err != nil {
			return "", err
		}
	}
	switch {
	case recorded:
		return "", nil
	case !lockHeld:
		return "", app.ErrLockLost
	default:
		return status.String, errNotPending
	}
}

// lockStillHeld runs lockStillHeldStmt with phase 3's values.
func lockStillHeld(ctx context.Context, db *gorm.DB, values map[string]any) (bool, error) {
	row, err := queryRow(ctx, db, lockStillHeldStmt, values)
	if err != nil {
		return false, err
	}
	var held bool
	if err := row.Scan(&held); err != nil {
		return false, mapError(fmt.Errorf("read the key's lock: %w", err))
	}
	return held, nil
}

// oneRecoveryPoint checks a claim that both took a key over and reserved:
// a takeover keeps the record's own recovery point, so a reservation next
// to it (id) would be a second payment, refund or transition for one
// command. It cannot happen (the command's reference is the recovery
// point's), and if the tables say otherwise the transaction must not
// commit.
func oneRecoveryPoint(k app.KeyClaim, claimedAndReserved bool, recoveryPoint, id sql.NullInt64, what string) error {
	if claimedAndReserved && recoveryPoint.Int64 != id.Int64 {
		return fmt.Errorf("claim key %q: it already has %s %d, and %s %d was reserved too",
			k.Scope.Key, what, recoveryPoint.Int64, what, id.Int64)
	}
	return nil
}

// reservedOrNil is a claim's reserved row or recovery point as the domain
// has it, nil when the claim has neither (id is NULL).
func reservedOrNil[T any](id sql.NullInt64, toDomain func() (T, error)) (*T, error) {
	if !id.Valid {
		return nil, nil
	}
	v, err := toDomain()
	if err != nil {
		return nil, err
	}
	return &v, nil
}
