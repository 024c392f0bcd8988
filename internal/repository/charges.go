package repository

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// ChargeStore implements app.ChargeStore on the payment table. The hot path
// of a charge is two statements, one round trip each: claimAndReserveSQL
// (phase 1, which reads the key first: phase 0's read) and
// recordOutcomeSQL (phase 3), each atomic on its own. Both are
// data-modifying CTEs, one clause per step, each saying which rule it
// enforces, in their files in statements/. pgbench runs the same statements
// for the benchmark's ceiling (pgbench/*.pgbench, kept in step by
// TestPgbenchScriptsRunTheServicesStatements).
type ChargeStore struct {
	conn
}

// claimAndReserveSQL is a charge's phase 1: the key's record read, the
// payment reserved and the key claimed, @atomic on the pool or every
// answer inside a transaction.
//
//go:embed statements/charge_claim.sql
var claimAndReserveSQL string

// claimStepAndReserveSQL is claimAndReserveSQL for a saga step tried for
// the first time, its saga_step row first, @atomic only.
//
//go:embed statements/charge_step_claim.sql
var claimStepAndReserveSQL string

// recordOutcomeSQL is a charge's phase 3: the key's outcome, the payment's
// final status and its event, all or none.
//
//go:embed statements/charge_record.sql
var recordOutcomeSQL string

// releaseChargeSQL gives a claim and its PENDING payment back.
//
//go:embed statements/charge_release.sql
var releaseChargeSQL string

// reserveSQL is phase 1's rare path: the PENDING payment inserted unless a
// unique index says no (the second layer's UNIQUE (payment_provider,
// external_payment_id), or the third's ux_payment_order_live). ON CONFLICT
// DO NOTHING with no target covers both: a violation would abort the
// transaction (and the key's claim with it), while DO NOTHING waits for a
// concurrent insert of the same pair or order to commit and then yields no
// row.
const reserveSQL = `
INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method)
VALUES (?, ?, ?, ?, ?, ?, ?, 'PENDING', ?)
ON CONFLICT DO NOTHING
RETURNING *`

// externalPaymentSQL reads the row the second layer stopped on.
const externalPaymentSQL = `
SELECT * FROM payment WHERE payment_provider = ? AND external_payment_id = ?`

// livePaymentOfOrderSQL reads the row the third layer stopped on: the
// order's one PENDING, SUCCEEDED or AUTHORIZED payment (holds_order).
const livePaymentOfOrderSQL = `
SELECT * FROM payment WHERE order_id = ? AND holds_order`

var (
	claimAndReserveStmt     = compileNamed(claimAndReserveSQL)
	claimStepAndReserveStmt = compileNamed(claimStepAndReserveSQL)
	recordOutcomeStmt       = compileNamed(recordOutcomeSQL)
	releaseChargeStmt       = compileNamed(releaseChargeSQL)
)

// row is the one row of a statement's answer: *sql.Row in a transaction,
// pgxRow outside one.
type row interface{ Scan(dest ...any) error }

// queryRow runs one of the compiled statements on db's connection: the
// transaction's inside Transact. Outside one it hands the statement to pgx
// on a connection of the pool (pgxRow). Both end the statement when ctx
// ends, but database/sql starts a goroutine a statement to watch ctx where
// pgx registers a callback: measured on the hot path's two statements a
// charge, pgx's way takes about 5 % less of the service's CPU a charge
// (decision 0033; docs/benchmarks.md, "The hot path per statement").
func queryRow(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (row, error) {
	args, err := q.args(values)
	if err != nil {
		return nil, err
	}
	if pool, ok := db.Statement.ConnPool.(*sql.DB); ok {
		return pgxRow{ctx: ctx, pool: pool, text: q.text, args: args}, nil
	}
	return db.Statement.ConnPool.QueryRowContext(ctx, q.text, args...), nil
}

// pgxRow runs its statement when it is scanned, on a connection of pool
// taken for the statement alone. database/sql still keeps the pool: it
// checks the connection before handing it out (a broken one is replaced,
// as for its own statements) and discards it when pgx has closed it.
type pgxRow struct {
	ctx  context.Context
	pool *sql.DB
	text string
	args []any
}

func (r pgxRow) Scan(dest ...any) error {
	c, err := r.pool.Conn(r.ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(driverConn any) error {
		return driverConn.(*stdlib.Conn).Conn().QueryRow(r.ctx, r.text, r.args...).Scan(dest...)
	})
}

// chargeNeedsTransactionCode is the SQLSTATE of charge_needs_transaction's
// error; mapError turns it into app.ErrClaimNeedsTransaction.
const chargeNeedsTransactionCode = "PC001"

// captureMethod is the payment.capture_method of a charge.
func captureMethod(c domain.Charge) string {
	if c.Manual() {
		return string(domain.CaptureManual)
	}
	return string(domain.CaptureAutomatic)
}

// Claim implements app.ChargeStore: claimAndReserveSQL, @atomic on the pool.
func (s *ChargeStore) Claim(ctx context.Context, k app.KeyClaim, ch domain.Charge) (app.ChargeClaimed, error) {
	return s.claim(ctx, claimAndReserveStmt, k, ch, map[string]any{})
}

// ClaimStep implements app.ChargeStore: claimStepAndReserveSQL, on the pool.
func (s *ChargeStore) ClaimStep(ctx context.Context, k app.KeyClaim, ch domain.Charge, step app.SagaStep) (app.ChargeClaimed, error) {
	if s.inTx {
		return app.ChargeClaimed{}, errors.New("claim a saga step: on the pool only, where the statement keeps only the usual answer")
	}
	return s.claim(ctx, claimStepAndReserveStmt, k, ch, map[string]any{"saga": step.SagaID, "step": step.Name})
}

// claim runs a charge's phase 1 statement q with values and the charge's
// and key's parameters.
func (s *ChargeStore) claim(ctx context.Context, q namedSQL, k app.KeyClaim, ch domain.Charge, values map[string]any) (res app.ChargeClaimed, err error) {
	values["order"] = int64(ch.OrderID)
	values["customer"] = int64(ch.CustomerID)
	values["amount"] = ch.Amount.Amount()
	values["currency"] = string(ch.Amount.Currency())
	values["provider"] = string(ch.Provider)
	values["external"] = string(ch.ExternalPaymentID)
	values["capture_method"] = captureMethod(ch)
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, q, s.claimValues(k, values))
		if err != nil {
			return err
		}
		var recoveryPoint sql.NullInt64
		var p nullablePaymentRow
		var standing recordRow
		targets := append([]any{&res.Claimed, &res.Reserved, &recoveryPoint, &res.OrderMatches, &res.SagaID}, p.targets()...)
		if err := row.Scan(append(targets, standing.targets()...)...); err != nil {
			return fmt.Errorf("claim key and reserve payment: %w", err)
		}
		res.Standing = standing.standing(k.Scope)
		if err := oneRecoveryPoint(k, res.Claimed && res.Reserved, recoveryPoint, p.ID, "payment"); err != nil {
			return err
		}
		res.Payment, err = reservedOrNil(p.ID, p.toDomain)
		return err
	})
	return res, err
}

// reserveAttempts bounds Reserve's retries when the row in the way is gone
// by the time it is read (a concurrent release, or a decline that took the
// order's PENDING payment out of the third layer's index).
const reserveAttempts = 3

// afterReserveConflict runs between a conflicting insert and the reads, in
// tests only, to make the race that the retry loop handles happen.
var afterReserveConflict func()

func (s *ChargeStore) Reserve(ctx context.Context, k app.KeyClaim, c domain.Charge) (app.ChargeReservation, error) {
	var res app.ChargeReservation
	err := s.run(ctx, func(db *gorm.DB) error {
		var err error
		res, err = reserve(db.WithContext(ctx), k.Scope.ClientID, c)
		return err
	})
	if err != nil || res.Kind != app.ChargeReserved {
		return res, err
	}
	// The reservation is the claim's recovery point.
	return res, s.updateOwned(ctx, k.Scope, k.Token, map[string]any{
		"payment_id": int64(res.Payment.ID),
		"updated_at": gorm.Expr("now()"),
	})
}

func reserve(db *gorm.DB, client domain.ClientID, c domain.Charge) (app.ChargeReservation, error) {
	for range reserveAttempts {
		var inserted, byExternal, liveOfOrder []paymentRow
		err := db.Raw(reserveSQL,
			string(client), int64(c.OrderID), int64(c.CustomerID), string(c.Provider), string(c.ExternalPaymentID),
			c.Amount.Amount(), string(c.Amount.Currency()), captureMethod(c),
		).Scan(&inserted).Error
		if err != nil {
			return app.ChargeReservation{}, fmt.Errorf("reserve payment: %w", err)
		}
		if len(inserted) == 1 {
			return reservation(app.ChargeReserved, inserted[0])
		}
		if afterReserveConflict != nil {
			afterReserveConflict()
		}
		// The second layer first: the same external payment under a new key
		// is answered by that payment, whatever else the order has.
		if err := db.Raw(externalPaymentSQL, string(c.Provider), string(c.ExternalPaymentID)).Scan(&byExternal).Error; err != nil {
			return app.ChargeReservation{}, fmt.Errorf("read payment by external id: %w", err)
		}
		if len(byExternal) == 1 {
			return reservation(app.ChargeExternalPaymentExists, byExternal[0])
		}
		if err := db.Raw(livePaymentOfOrderSQL, int64(c.OrderID)).Scan(&liveOfOrder).Error; err != nil {
			return app.ChargeReservation{}, fmt.Errorf("read live payment of order: %w", err)
		}
		if len(liveOfOrder) == 1 {
			return reservation(app.ChargeOrderHasLivePayment, liveOfOrder[0])
		}
		// The row in the way went away between the statements: try again.
	}
	return app.ChargeReservation{}, app.ErrReserveContended
}

func reservation(kind app.ChargeReservationKind, row paymentRow) (app.ChargeReservation, error) {
	p, err := row.toDomain()
	return app.ChargeReservation{Kind: kind, Payment: p}, err
}

// Record implements app.ChargeStore: recordOutcomeSQL.
func (s *ChargeStore) Record(ctx context.Context, rec app.ChargeRecord) error {
	ev, err := newPaymentOutboxRow(ctx, rec.Event, s.outbox)
	if err != nil {
		return err
	}
	p := rec.Event.Payment
	status, err := s.recordOutcome(ctx, recordOutcomeStmt, rec.Key.Scope, rec.Key.Token, rec.Response, ev, map[string]any{
		"payment_id":   int64(p.ID),
		"final_status": string(p.Status),
	})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record payment %d as %s: it is %s, not PENDING", p.ID, p.Status, status)
	}
	return err
}

// Release implements app.ChargeStore: releaseChargeSQL.
func (s *ChargeStore) Release(ctx context.Context, k app.KeyClaim, payment domain.PaymentID) error {
	return s.releaseKey(ctx, releaseChargeStmt, k, map[string]any{"payment": int64(payment)})
}

func (s *ChargeStore) Get(ctx context.Context, id domain.PaymentID) (domain.Payment, error) {
	var row paymentRow
	err := s.run(ctx, func(db *gorm.DB) error {
		err := db.WithContext(ctx).Take(&row, int64(id)).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return domain.ErrPaymentNotFound
		}
		if err != nil {
			return fmt.Errorf("get payment: %w", err)
		}
		return nil
	})
	if err != nil {
		return domain.Payment{}, err
	}
	return row.toDomain()
}

// paymentRow is a row of payment.
type paymentRow struct {
	ID                int64 `gorm:"primaryKey"`
	ClientID          string
	OrderID           int64
	CustomerID        int64
	PaymentProvider   string
	ExternalPaymentID string
	Amount            decimal.Decimal
	Currency          string
	Status            string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CaptureMethod     string
	CapturedAmount    decimal.NullDecimal
}

func (paymentRow) TableName() string { return "payment" }

func (row paymentRow) toDomain() (domain.Payment, error) {
	money, err := domain.NewMoney(row.Amount, domain.Currency(row.Currency))
	if err != nil {
		return domain.Payment{}, fmt.Errorf("payment %d: %w", row.ID, err)
	}
	charge, err := domain.NewCharge(domain.OrderID(row.OrderID), domain.CustomerID(row.CustomerID), money,
		domain.ProviderName(row.PaymentProvider), domain.ExternalPaymentID(row.ExternalPaymentID))
	if err != nil {
		return domain.Payment{}, fmt.Errorf("payment %d: %w", row.ID, err)
	}
	charge.CaptureMethod = domain.CaptureMethod(row.CaptureMethod)
	p := domain.Payment{
		ID:        domain.PaymentID(row.ID),
		ClientID:  domain.ClientID(row.ClientID),
		Charge:    charge,
		Status:    domain.PaymentStatus(row.Status),
		CreatedAt: row.CreatedAt.UTC(),
	}
	if row.CapturedAmount.Valid {
		captured, err := domain.NewMoney(row.CapturedAmount.Decimal, money.Currency())
		if err != nil {
			return domain.Payment{}, fmt.Errorf("payment %d: captured: %w", row.ID, err)
		}
		p.Captured = &captured
	}
	return p, nil
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
	CaptureMethod     sql.NullString
	CapturedAmount    decimal.NullDecimal
}

// targets are the row's scan targets, in the order of its columns in every
// query that reads one: the payment table's, and the clause
// payment_columns of the statement files.
func (p *nullablePaymentRow) targets() []any {
	return []any{&p.ID, &p.ClientID, &p.OrderID, &p.CustomerID, &p.PaymentProvider,
		&p.ExternalPaymentID, &p.Amount, &p.Currency, &p.Status, &p.CreatedAt, &p.CaptureMethod, &p.CapturedAmount}
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
		CaptureMethod:     p.CaptureMethod.String,
		CapturedAmount:    p.CapturedAmount,
	}.toDomain()
}

// paymentEventV1 is the value of PaymentSucceeded.v1, PaymentDeclined.v1
// and PaymentFailed.v1 messages: the wire contract with every consumer of
// payment.events. Add optional fields only; anything else is a new event
// type (.v2).
type paymentEventV1 struct {
	EventID   uuid.UUID `json:"eventId"`
	SagaID    *string   `json:"sagaId,omitempty"`
	EventType string    `json:"eventType"`
	PaymentID int64     `json:"paymentId"`
	OrderID   int64     `json:"orderId"`
	// CustomerID and OrderID are numbers, as in the HTTP API; Amount is a
	// decimal string, never a float.
	CustomerID        int64     `json:"customerId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	PaymentProvider   string    `json:"paymentProvider"`
	ExternalPaymentID string    `json:"externalPaymentId"`
	OccurredAt        time.Time `json:"occurredAt"`
	// A two-step payment's events say so (captureMethod manual); a
	// capture's carry what it took and its reference.
	CaptureMethod     string `json:"captureMethod,omitempty"`
	CapturedAmount    string `json:"capturedAmount,omitempty"`
	ExternalCaptureID string `json:"externalCaptureId,omitempty"`
}

// newPaymentOutboxRow renders a payment event as its outbox row, keyed by
// the order.
func newPaymentOutboxRow(ctx context.Context, e app.PaymentEvent, cfg OutboxConfig) (outboxEventRow, error) {
	p := e.Payment
	v := paymentEventV1{
		EventID:           e.ID,
		EventType:         e.Type,
		PaymentID:         int64(p.ID),
		OrderID:           int64(p.Charge.OrderID),
		CustomerID:        int64(p.Charge.CustomerID),
		Amount:            p.Charge.Amount.AmountString(),
		Currency:          string(p.Charge.Amount.Currency()),
		PaymentProvider:   string(p.Charge.Provider),
		ExternalPaymentID: string(p.Charge.ExternalPaymentID),
		OccurredAt:        e.OccurredAt.UTC(),
		SagaID:            sagaIDField(e.SagaID),
	}
	if p.Charge.Manual() {
		v.CaptureMethod = string(domain.CaptureManual)
	}
	if t := e.Transition; t != nil && t.Kind == domain.TransitionCapture {
		v.CapturedAmount, v.ExternalCaptureID = t.Amount.AmountString(), t.Reference
	}
	return newOutboxRow(ctx, cfg, e.ID, e.Type, int64(p.Charge.OrderID), v)
}

var _ app.ChargeStore = (*ChargeStore)(nil)
