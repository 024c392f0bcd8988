package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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

// recordRow scans lookupKeySQL's columns, which a claim's standingAnswers
// are too; all NULL when the claim found no record.
type recordRow struct {
	hash, status, response sql.NullString
	httpStatus             sql.NullInt32
	paymentID              sql.NullInt64
	lockToken              uuid.NullUUID
	lockedUntil, createdAt sql.NullTime
}

func (r *recordRow) targets() []any {
	return []any{&r.hash, &r.status, &r.httpStatus, &r.response, &r.paymentID, &r.lockToken, &r.lockedUntil, &r.createdAt}
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
	if r.paymentID.Valid {
		id := domain.PaymentID(r.paymentID.Int64)
		rec.PaymentID = &id
	}
	return rec, true
}

// standing is the record a claim's statement found in its way
// (standingAnswers), nil when none stood.
func (r *recordRow) standing(scope app.IdempotencyScope) *app.IdempotencyRecord {
	rec, found := r.toApp(scope)
	if !found {
		return nil
	}
	return &rec
}

// completeKeySQL stores an answer that needs no provider call, fenced by
// the lock token, with the answer's own message when it has one (a saga
// step's reply): both or neither.
var completeKeySQL = `
WITH
` + completeKeyClause("true") + `,
` + replyClause("completed") + `
SELECT EXISTS (SELECT 1 FROM completed)`

// answerKeySQL stores an answer under a key that holds no record, with its
// message when it has one; a record already there is left as it is.
var answerKeySQL = `
WITH
answered AS (
    INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status)
    VALUES (@client, @key, @command, @hash, 'COMPLETED', CAST(@response AS json), @http_status)
        ON CONFLICT (client_id, idempotency_key) DO NOTHING
 RETURNING 1
),
` + replyClause("answered") + `
SELECT EXISTS (SELECT 1 FROM answered)`

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
// scope's answer, its message's included (replyClause).
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

// replyValues are replyClause's parameters: resp's message, if it has one.
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
		res := ownedRecord(db.WithContext(ctx), scope, token).Updates(set)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return app.ErrLockLost
		}
		return nil
	})
}

// ownedRecord is updateOwned's record on db, apart from updating it: the
// plan tests explain what it sends (claim_index_plan_test.go).
func ownedRecord(db *gorm.DB, scope app.IdempotencyScope, token uuid.UUID) *gorm.DB {
	return db.Model(&idempotencyRecordRow{}).Where(
		"client_id = ? AND idempotency_key = ? AND status = 'IN_PROGRESS' AND lock_token = ?",
		string(scope.ClientID), scope.Key, token)
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
	TransitionID   *int64
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
	if row.TransitionID != nil {
		id := domain.TransitionID(*row.TransitionID)
		rec.TransitionID = &id
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

// The key in every command's statements: its claim, phase 1's
// usual-answer guard, its fenced completion and release, and the outbox
// row, as SQL clauses; and the Go that runs phase 3 (recordOutcome) and the
// release (releaseKey). Each command composes them with its own
// reservation clauses into one statement at start-up (charges.go,
// refunds.go), so a phase stays one statement and one round trip.
// statements/*.sql shows each composed statement whole, as PostgreSQL
// receives it.

// claimKeyClause is the clause "claimed" for command, whose recovery point
// is the column recoveryPoint, set from the id of the row its statement's
// "reserved" clause inserted (which comes first: the key's lock is the last
// every command takes). It returns the recovery point.
//
// Insert-if-absent, never find-then-save (R-DIST-IDEM-3). The record names
// its command: the jobs read a recovery point only in records of the
// command whose it is. The DO UPDATE branch is the takeover
// of a crashed or answer-lost claim: only an IN_PROGRESS record of the same
// command and command hash whose lock has run out (the hash covers the
// operation too, but how a command hashes is its own affair; the name is
// checked as well), and the new lock_token fences the old owner out. A
// takeover keeps the recovery point it finds.
//
// paymentLink, when not empty, also writes the reservation's payment (the
// column of that name in "reserved") into the record's payment_id, kept on
// a takeover like the recovery point. A refund names it: a release older
// than the record's command column reads payment_id NULL on any
// unfinished record as "a charge that reserved nothing" and deletes it, so
// during a rolling deploy from one a refund's record must not look like
// one (docs/decisions/0022). A charge passes "": its payment_id is its
// recovery point already.
//
// gate, when not empty, is a condition the claim is made under: false, the
// insert writes nothing, and takes no lock on a record that stands (a
// conflict's DO UPDATE locks the row even when its WHERE says no).
func claimKeyClause(command app.CommandName, recoveryPoint, paymentLink, gate string) string {
	var linkColumn, linkValue, linkKept string
	if paymentLink != "" {
		linkColumn = ", payment_id"
		linkValue = ", (SELECT " + paymentLink + " FROM reserved)"
		linkKept = "\n           payment_id = coalesce(r.payment_id, EXCLUDED.payment_id),"
	}
	row := `@client, @key, '{command}', @hash, 'IN_PROGRESS', @token, clock_timestamp() + @lock_micros * interval '1 microsecond', (SELECT id FROM reserved){link_value}`
	insert := "VALUES (" + row + ")"
	if gate != "" {
		insert = "SELECT " + row + "\n     WHERE " + gate
	}
	return strings.NewReplacer("{command}", string(command), "{recovery_point}", recoveryPoint,
		"{link_column}", linkColumn, "{link_value}", linkValue, "{link_kept}", linkKept).Replace(`claimed AS (
    INSERT INTO idempotency_record AS r (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, {recovery_point}{link_column})
    ` + insert + `
        ON CONFLICT (client_id, idempotency_key) DO UPDATE
       SET lock_token = EXCLUDED.lock_token,
           locked_until = EXCLUDED.locked_until,
           {recovery_point} = coalesce(r.{recovery_point}, EXCLUDED.{recovery_point}),{link_kept}
           updated_at = now()
     WHERE ` + takeoverAllowed("r.", "EXCLUDED.command", "EXCLUDED.command_hash") + `
 RETURNING r.{recovery_point}
)`)
}

// takeoverAllowed is the one condition under which a claim takes a record
// over, the columns prefixed by record: an IN_PROGRESS claim of the same
// command (command) and command hash (hash) whose lock has run out, by the
// database's clock. claimKeyClause takes over under it; standingClause
// lets the claim go ahead under it.
func takeoverAllowed(record, command, hash string) string {
	return strings.NewReplacer("{r}", record, "{command}", command, "{hash}", hash).Replace(`{r}status = 'IN_PROGRESS'
       AND {r}locked_until < clock_timestamp()
       AND {r}command = {command}
       AND {r}command_hash = {hash}`)
}

// standingClause is the clause "standing": the key's record as the
// statement's snapshot sees it, read before anything is written, so that
// phase 1's statement is phase 0's read too. stops: the record is one
// the claim cannot take over (anything but an IN_PROGRESS claim of the
// same command and hash whose lock has run out). Every write of the
// command's claim is made under keyFree; so a replay, a reused key or a
// live claim is answered from this read, in the one round trip of the
// read it replaces, having written and locked nothing.
func standingClause(command app.CommandName) string {
	return `-- The key's record, read first: a record in the claim's way stops every
-- write below, and is the answer.
standing AS (
    SELECT command_hash, status, http_status, response::text AS response, payment_id, lock_token, locked_until, created_at,
           NOT (` + strings.ReplaceAll(takeoverAllowed("", "'"+string(command)+"'", "@hash"), "\n", "\n         ") + `) AS stops
      FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
)`
}

// keyStands: a record stands in the claim's way (standingClause).
const keyStands = `EXISTS (SELECT 1 FROM standing WHERE stops)`

// keyFree: no record stands in the claim's way.
const keyFree = `NOT ` + keyStands

// standingAnswers are the answers of a record in the claim's way, the
// columns of lookupKeySQL (recordRow), NULL when none stands: "standing
// st" joined ON st.stops. Each is named apart from the claim's own
// answers (payment_id, status), which a reader by name, such as the
// pgbench ceiling's \gset, would otherwise take from the wrong one.
const standingAnswers = `st.command_hash AS standing_command_hash, st.status AS standing_status,
       st.http_status AS standing_http_status, st.response AS standing_response,
       st.payment_id AS standing_payment_id, st.lock_token AS standing_lock_token,
       st.locked_until AS standing_locked_until, st.created_at AS standing_created_at`

// goesOnWithClause is the clause name, the reservation a command's phase
// 1 goes on with: the one its "reserved" clause just inserted or, after a
// takeover, the recovery point (recoveryPoint) of table (as alias) that
// "claimed" returned.
func goesOnWithClause(name, table, alias, recoveryPoint string) string {
	return `-- The reservation this command goes on with: the one just reserved, or,
-- after a takeover, the recovery point.
` + name + ` AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT ` + alias + `.* FROM ` + table + ` ` + alias + ` JOIN claimed c ON ` + alias + `.id = c.` + recoveryPoint + `
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)`
}

// claimAnswers are phase 1's first three answers: the key claimed, the
// reservation made, and the recovery point the claim holds.
func claimAnswers(recoveryPoint string) string {
	return `EXISTS (SELECT 1 FROM claimed) AS claimed,
       EXISTS (SELECT 1 FROM reserved) AS reserved,
       (SELECT ` + recoveryPoint + ` FROM claimed) AS recovery_point`
}

// onlyTheUsualAnswer is phase 1's final WHERE condition: run @atomic (on
// its own), the statement keeps only a claimed key whose reservation, the
// row alias reservation, is PENDING and is the claim's recovery point
// recoveryPoint; any other answer calls charge_needs_transaction() (one
// function for every command's phase 1), whose error rolls back everything
// the statement wrote. CASE, because only CASE fixes the
// order in which SQL evaluates; coalesce, because a missing reservation
// makes it NULL.
//
// unless, when not empty, is an answer that is kept although it is not
// the usual one, because nothing was written for it: a record in the
// claim's way (NOT keyFree).
func onlyTheUsualAnswer(reservation, recoveryPoint, unless string) string {
	if unless != "" {
		unless = " AND NOT " + unless
	}
	return strings.NewReplacer("{r}", reservation, "{recovery_point}", recoveryPoint).Replace(`CASE WHEN @atomic` + unless + ` AND NOT coalesce(
                 EXISTS (SELECT 1 FROM claimed)
             AND {r}.status = 'PENDING'
             AND {r}.id = (SELECT {recovery_point} FROM claimed), false)
            THEN charge_needs_transaction()
            ELSE true
       END`)
}

// completeKeyClause is the clause "completed": the key completed with the
// response, fenced by the lock token, only when guard (the reservation is
// still PENDING) holds. A request whose lock was taken over matches nothing
// here, and so writes nothing anywhere: every other write of phase 3 hangs
// on this clause.
func completeKeyClause(guard string) string {
	return `completed AS (
    UPDATE idempotency_record
       SET status = 'COMPLETED', response = CAST(@response AS json), http_status = @http_status,
           lock_token = NULL, locked_until = NULL, updated_at = now()
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND ` + guard + `
 RETURNING 1
)`
}

// announceClause is the clause "announced", the outbox row (R-DIST-IDEM-1):
// one event per decided reservation, one row of from, written with the
// decision; the relay publishes it after the commit.
func announceClause(from string) string {
	return `announced AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @event_id, @topic, @message_key, @event_type, CAST(@payload AS json),
           CAST(NULLIF(@trace_context, '') AS json) -- '': the request was not traced
      FROM ` + from + `
 RETURNING 1
)`
}

// replyClause is the clause "replied": the stored response's own message
// (app.Publication), when @reply: a saga step's reply, whose payload is the
// response stored (@response), appended to the outbox with the answer it
// carries and hanging on from, the clause that stored that answer. A
// reply's message is its answer, byte for byte: a re-sent step gets it
// again with the same eventId (OutboxStore.Republish).
func replyClause(from string) string {
	return `replied AS (
    INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
    SELECT @reply_event_id, @reply_topic, @reply_key, @reply_type, CAST(@response AS json),
           CAST(NULLIF(@trace_context, '') AS json)
      FROM ` + from + `
     WHERE @reply
 RETURNING 1
)`
}

// lockHeldByToken: the token @token still owns the key, as the
// statement's snapshot sees it.
const lockHeldByToken = `EXISTS (SELECT 1 FROM idempotency_record
                WHERE client_id = @client AND idempotency_key = @key
                  AND status = 'IN_PROGRESS' AND lock_token = @token)`

// recordedAndLockHeld are phase 3's first two answers: the event was
// appended (so everything was written), and the token still owns the key
// (if not, ErrLockLost).
const recordedAndLockHeld = `EXISTS (SELECT 1 FROM announced) AS recorded,
       ` + lockHeldByToken + ` AS lock_held`

// lockStillHeldStmt asks lockHeldByToken again, in a snapshot of its own:
// see recordOutcome.
var lockStillHeldStmt = compileNamed(`SELECT ` + lockHeldByToken)

// releaseKeyClause is the clause "released": the claim deleted, fenced by
// the lock token, when guard holds; it returns the record's recovery point
// recoveryPoint. A request whose lock was taken over matches nothing here,
// and every other write of the release hangs on this clause.
func releaseKeyClause(recoveryPoint, guard string) string {
	return `released AS (
    DELETE FROM idempotency_record
     WHERE client_id = @client AND idempotency_key = @key
       AND status = 'IN_PROGRESS' AND lock_token = @token
       AND ` + guard + `
 RETURNING ` + recoveryPoint + `
)`
}

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

// recordOutcome runs a command's phase 3 statement q, built of
// completeKeyClause, the command's own settling and announceClause, and
// answering recordedAndLockHeld and the reservation's status. values are the
// command's own parameters; the key's, the response's and the event row's
// are added here. It returns nil when everything was written (and tells
// the outbox's waker, OutboxConfig.wrote), app.ErrLockLost when the token
// no longer owns the key, and errNotPending with the reservation's status
// otherwise.
func (c conn) recordOutcome(ctx context.Context, q namedSQL, scope app.IdempotencyScope, token uuid.UUID,
	resp app.StoredResponse, ev outboxEventRow, values map[string]any) (string, error) {
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
	values["event_id"] = ev.EventID
	values["topic"] = ev.Topic
	values["message_key"] = ev.MessageKey
	values["event_type"] = ev.EventType
	values["payload"] = ev.Payload
	values["trace_context"] = ptrString(ev.TraceContext)
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
		c.outbox.wrote()
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
