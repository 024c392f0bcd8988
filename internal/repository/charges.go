package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The hot path of a charge is three statements, one round trip each:
// lookupKeySQL (a replay is answered from it), claimAndReserveSQL (phase 1)
// and recordOutcomeSQL (phase 3), each atomic on its own. The two writes
// are data-modifying CTEs: one clause per step, each saying which rule it
// enforces. Parameters are named (@name), compiled once to $n
// (namedsql.go); pgbench runs the same statements for the benchmark's
// ceiling, with :name (pgbench/*.pgbench, kept in step by
// TestPgbenchScriptsRunTheServicesStatements).

// lookupKeySQL reads a key's record with no lock and no transaction: a
// replay of a completed key, a reused key, or a duplicate meeting a live
// lock is answered from this one read and writes nothing. Only an absent
// record, or a claim whose lock has run out, goes on to claimAndReserveSQL.
const lookupKeySQL = `
SELECT command_hash, status, http_status, response::text, payment_id, lock_token, locked_until, created_at
  FROM idempotency_record
 WHERE client_id = @client AND idempotency_key = @key`

// claimAndReserveSQL is phase 1 in one statement. Its answer can be "roll
// all of it back" (the key is held by another command; the order does not
// match; a payment in the way), and then nothing of it may stay. So it
// runs in one of two ways:
//
//   - @atomic, on its own (ChargeStore.ClaimAndReserve): the usual answer,
//     a claimed key with a PENDING payment to charge, commits in one round
//     trip. Any other answer raises charge_needs_transaction's error
//     (migration 00012), which rolls the whole statement back;
//   - inside a transaction (Charges.ClaimAndReserve), after such an error:
//     it returns every answer, and the rare ones take further statements
//     before the transaction commits or rolls back.
//
// The payment is reserved before the key is claimed, so that the claim's
// insert can carry the payment's id: a statement cannot update a row that
// one of its own clauses inserted, and the recovery point must be written
// with the claim. The order of the clauses is also the order of the locks
// every charge takes (payment, then key), so two charges never wait on each
// other in a cycle.
var claimAndReserveSQL = `
WITH
-- The order the charge must pay exactly: same customer, amount and
-- currency. No row: nothing is reserved, and the application tells an
-- unknown order from a mismatch (422, not stored).
matching_order AS (
    SELECT order_id
      FROM order_projection
     WHERE order_id = @order AND customer_id = @customer
       AND amount = @amount AND currency = @currency
),
-- Reserve the PENDING payment. ON CONFLICT DO NOTHING with no target covers
-- R-DIST-IDEM-4's UNIQUE (payment_provider, external_payment_id) and the
-- third layer's one live payment per order (migration 00006): under any
-- interleaving the database lets one reservation through, and a conflict
-- waits for the other's commit instead of aborting this transaction.
reserved AS (
    INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
    SELECT @client, @order, @customer, @provider, @external, @amount, @currency, 'PENDING'
      FROM matching_order
        ON CONFLICT DO NOTHING
 RETURNING *
),
` + claimKeyClause(app.CommandCharge, "payment_id", "") + `,
-- The payment this charge goes on with: the one just reserved, or, after
-- a takeover, the recovery point.
charged AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT p.* FROM payment p JOIN claimed c ON p.id = c.payment_id
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed,
       EXISTS (SELECT 1 FROM reserved) AS reserved,
       (SELECT payment_id FROM claimed) AS recovery_point,
       EXISTS (SELECT 1 FROM matching_order) AS order_matches,
       (SELECT saga_id FROM order_projection WHERE order_id = @order) AS saga_id,
       ch.id AS payment_id, ch.client_id, ch.order_id, ch.customer_id, ch.payment_provider,
       ch.external_payment_id, ch.amount, ch.currency, ch.status, ch.created_at
  FROM (SELECT 1) AS one
  LEFT JOIN charged ch ON true
-- On its own (atomic), keep only a claimed key with a PENDING payment,
-- which is its recovery point; any other answer raises, and the error
-- rolls back everything above. CASE, because only CASE fixes the order in
-- which SQL evaluates; coalesce, because a missing payment makes it NULL.
 WHERE ` + onlyTheUsualAnswer("ch", "payment_id")

// recordOutcomeSQL is phase 3 in one statement, atomic without a
// transaction around it: the key's outcome, the payment's final status and
// the event that announces it, all or none.
var recordOutcomeSQL = `
WITH
` + completeKeyClause("EXISTS (SELECT 1 FROM payment WHERE id = @payment_id AND status = 'PENDING')") + `,
-- The provider's decision, only with the key's completion.
decided AS (
    UPDATE payment
       SET status = @final_status, updated_at = now()
     WHERE id = @payment_id AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING id
),
` + announceClause("decided") + `
SELECT ` + recordedAndLockHeld + `,
       (SELECT status FROM payment WHERE id = @payment_id) AS payment_status`

var (
	lookupKeyStmt       = compileNamed(lookupKeySQL)
	claimAndReserveStmt = compileNamed(claimAndReserveSQL)
	recordOutcomeStmt   = compileNamed(recordOutcomeSQL)
)

// queryRow runs one of the compiled statements on db's connection pool: the
// transaction's inside Transact.
func queryRow(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (*sql.Row, error) {
	args, err := q.args(values)
	if err != nil {
		return nil, err
	}
	return db.Statement.ConnPool.QueryRowContext(ctx, q.text, args...), nil
}

// Charges implements app.Charges: phase 1 inside the caller's transaction.
type Charges struct {
	db *gorm.DB
}

// ClaimAndReserve implements app.Charges: the statement inside the
// caller's transaction, returning every answer.
func (s *Charges) ClaimAndReserve(ctx context.Context, c app.ChargeClaim) (app.ClaimAndReserveResult, error) {
	return claimAndReserve(ctx, s.db, c, false)
}

// claimAndReserve runs claimAndReserveSQL; atomic: on its own, keeping only
// the usual answer.
func claimAndReserve(ctx context.Context, db *gorm.DB, c app.ChargeClaim, atomic bool) (app.ClaimAndReserveResult, error) {
	ch := c.Charge
	row, err := queryRow(ctx, db, claimAndReserveStmt, map[string]any{
		"atomic":      atomic,
		"client":      string(c.Scope.ClientID),
		"key":         c.Scope.Key,
		"hash":        c.CommandHash,
		"token":       c.Token,
		"lock_micros": c.LockFor.Microseconds(),
		"order":       int64(ch.OrderID),
		"customer":    int64(ch.CustomerID),
		"amount":      ch.Amount.Amount(),
		"currency":    string(ch.Amount.Currency()),
		"provider":    string(ch.Provider),
		"external":    string(ch.ExternalPaymentID),
	})
	if err != nil {
		return app.ClaimAndReserveResult{}, err
	}
	var res app.ClaimAndReserveResult
	var recoveryPoint sql.NullInt64
	var p nullablePaymentRow
	err = row.Scan(append([]any{&res.Claimed, &res.Reserved, &recoveryPoint, &res.OrderMatches, &res.SagaID}, p.targets()...)...)
	if err != nil {
		return app.ClaimAndReserveResult{}, fmt.Errorf("claim key and reserve payment: %w", err)
	}
	// A takeover keeps the record's own payment; a reservation next to it
	// would mean a second payment for one command. It cannot happen (the
	// command's external payment is that payment's), and if the tables say
	// otherwise the transaction must not commit.
	if res.Claimed && res.Reserved && recoveryPoint.Int64 != p.ID.Int64 {
		return app.ClaimAndReserveResult{}, fmt.Errorf("claim key %q: it already has payment %d, and payment %d was reserved too",
			c.Scope.Key, recoveryPoint.Int64, p.ID.Int64)
	}
	if p.ID.Valid {
		payment, err := p.toDomain()
		if err != nil {
			return app.ClaimAndReserveResult{}, err
		}
		res.Payment = &payment
	}
	return res, nil
}

// nullablePaymentRow is a payment read through a LEFT JOIN.
type nullablePaymentRow struct {
	ID                sql.NullInt64
	ClientID          sql.NullString
	OrderID           sql.NullInt64
	CustomerID        sql.NullInt64
	PaymentProvider   sql.NullString
	ExternalPaymentID sql.NullString
	Amount            decimal.NullDecimal
	Currency          sql.NullString
	Status            sql.NullString
	CreatedAt         sql.NullTime
}

// targets are the row's scan targets, in the order of its columns in every
// query that reads one (the payment table's).
func (p *nullablePaymentRow) targets() []any {
	return []any{&p.ID, &p.ClientID, &p.OrderID, &p.CustomerID, &p.PaymentProvider,
		&p.ExternalPaymentID, &p.Amount, &p.Currency, &p.Status, &p.CreatedAt}
}

func (p nullablePaymentRow) toDomain() (domain.Payment, error) {
	return paymentRow{
		ID:                p.ID.Int64,
		ClientID:          p.ClientID.String,
		OrderID:           p.OrderID.Int64,
		CustomerID:        p.CustomerID.Int64,
		PaymentProvider:   p.PaymentProvider.String,
		ExternalPaymentID: p.ExternalPaymentID.String,
		Amount:            p.Amount.Decimal,
		Currency:          p.Currency.String,
		Status:            p.Status.String,
		CreatedAt:         p.CreatedAt.Time,
	}.toDomain()
}

// ChargeStore implements app.ChargeStore: the charge's statements that are
// atomic on their own.
type ChargeStore struct {
	atomicStatements
}

// NewChargeStore returns the charge's single-statement store. Its
// statements wait their turn at gate (nil: no gate), the Transactor's.
func NewChargeStore(db *gorm.DB, outbox OutboxConfig, gate *Gate) *ChargeStore {
	return &ChargeStore{atomicStatements{db: db, outbox: outbox, gate: gate}}
}

// ClaimAndReserve implements app.ChargeStore: the statement on its own.
func (s *ChargeStore) ClaimAndReserve(ctx context.Context, c app.ChargeClaim) (app.ClaimAndReserveResult, error) {
	return claimOnItsOwn(ctx, s.atomicStatements, func(db *gorm.DB) (app.ClaimAndReserveResult, error) {
		return claimAndReserve(ctx, db, c, true)
	})
}

// chargeNeedsTransactionCode is the SQLSTATE of charge_needs_transaction's
// error (migration 00012); mapError turns it into
// app.ErrClaimNeedsTransaction.
const chargeNeedsTransactionCode = "PC001"

// LookupKey implements app.ChargeStore.
func (s *ChargeStore) LookupKey(ctx context.Context, scope app.IdempotencyScope) (app.IdempotencyRecord, bool, error) {
	if err := s.gate.enter(ctx); err != nil {
		return app.IdempotencyRecord{}, false, err
	}
	defer s.gate.leave()
	return lookupKey(ctx, s.db, scope)
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
		return app.IdempotencyRecord{}, false, mapError(fmt.Errorf("look up idempotency key: %w", err))
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

// RecordOutcome implements app.ChargeStore.
func (s *ChargeStore) RecordOutcome(ctx context.Context, o app.OutcomeRecord) error {
	ev, err := newOutboxEventRow(ctx, o.Event, s.outbox)
	if err != nil {
		return err
	}
	status, err := s.recordOutcome(ctx, recordOutcomeStmt, o.Scope, o.Token, o.Response, ev, map[string]any{
		"payment_id":   int64(o.Event.Payment.ID),
		"final_status": string(o.Event.Payment.Status),
	})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record payment %d as %s: it is %s, not PENDING", o.Event.Payment.ID, o.Event.Payment.Status, status)
	}
	return err
}

// ptrString is s's value, or "" for nil.
func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var (
	_ app.Charges     = (*Charges)(nil)
	_ app.ChargeStore = (*ChargeStore)(nil)
)
