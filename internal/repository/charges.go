package repository

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
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

// reserveSQL is phase 1's rare path: the PENDING payment inserted on its
// own, unless a unique index says no; externalPaymentSQL and
// livePaymentOfOrderSQL read the row in the way, of the second layer or
// the third.
var (
	//go:embed statements/charge_reserve.sql
	reserveSQL string
	//go:embed statements/payment_by_external.sql
	externalPaymentSQL string
	//go:embed statements/payment_live_of_order.sql
	livePaymentOfOrderSQL string
)

// getPaymentSQL reads a payment by its id.
//
//go:embed statements/payment_get.sql
var getPaymentSQL string

var (
	claimAndReserveStmt     = compileNamed(claimAndReserveSQL)
	claimStepAndReserveStmt = compileNamed(claimStepAndReserveSQL)
	recordOutcomeStmt       = compileNamed(recordOutcomeSQL)
	releaseChargeStmt       = compileNamed(releaseChargeSQL)
	reserveStmt             = compileNamed(reserveSQL)
	externalPaymentStmt     = compileNamed(externalPaymentSQL)
	livePaymentOfOrderStmt  = compileNamed(livePaymentOfOrderSQL)
	getPaymentStmt          = compileNamed(getPaymentSQL)
)

// claimNeedsTransactionCode is the SQLSTATE of claim_needs_transaction's
// error; mapError turns it into app.ErrClaimNeedsTransaction.
const claimNeedsTransactionCode = "PC001"

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
	values["payment_method"] = ch.PaymentMethod
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
		res, err = reserve(ctx, db, k.Scope.ClientID, c)
		return err
	})
	if err != nil || res.Kind != app.ChargeReserved {
		return res, err
	}
	// The reservation is the claim's recovery point.
	return res, s.updateOwned(ctx, k, setPaymentRecoveryPointStmt, map[string]any{"payment": int64(res.Payment.ID)})
}

func reserve(ctx context.Context, db *gorm.DB, client domain.ClientID, c domain.Charge) (app.ChargeReservation, error) {
	for range reserveAttempts {
		inserted, err := readPayment(ctx, db, reserveStmt, map[string]any{
			"client": string(client), "order": int64(c.OrderID), "customer": int64(c.CustomerID),
			"provider": string(c.Provider), "external": string(c.ExternalPaymentID),
			"amount": c.Amount.Amount(), "currency": string(c.Amount.Currency()), "capture_method": captureMethod(c),
			"payment_method": c.PaymentMethod,
		})
		if err != nil {
			return app.ChargeReservation{}, fmt.Errorf("reserve payment: %w", err)
		}
		if inserted != nil {
			return app.ChargeReservation{Kind: app.ChargeReserved, Payment: *inserted}, nil
		}
		if afterReserveConflict != nil {
			afterReserveConflict()
		}
		// The second layer first: the same external payment under a new key
		// is answered by that payment, whatever else the order has.
		byExternal, err := readPayment(ctx, db, externalPaymentStmt, map[string]any{
			"provider": string(c.Provider), "external": string(c.ExternalPaymentID)})
		if err != nil {
			return app.ChargeReservation{}, fmt.Errorf("read payment by external id: %w", err)
		}
		if byExternal != nil {
			return app.ChargeReservation{Kind: app.ChargeExternalPaymentExists, Payment: *byExternal}, nil
		}
		liveOfOrder, err := readPayment(ctx, db, livePaymentOfOrderStmt, map[string]any{"order": int64(c.OrderID)})
		if err != nil {
			return app.ChargeReservation{}, fmt.Errorf("read live payment of order: %w", err)
		}
		if liveOfOrder != nil {
			return app.ChargeReservation{Kind: app.ChargeOrderHasLivePayment, Payment: *liveOfOrder}, nil
		}
		// The row in the way went away between the statements: try again.
	}
	return app.ChargeReservation{}, app.ErrReserveContended
}

// readPayment runs q, which answers at most one payment (its clause
// payment_columns), and returns it, or nil for none.
func readPayment(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (*domain.Payment, error) {
	r, err := queryRow(ctx, db, q, values)
	if err != nil {
		return nil, err
	}
	var p nullablePaymentRow
	err = r.Scan(p.targets()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	payment, err := p.toDomain()
	return &payment, err
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
	var p *domain.Payment
	err := s.run(ctx, func(db *gorm.DB) (err error) {
		p, err = readPayment(ctx, db, getPaymentStmt, map[string]any{"id": int64(id)})
		if err != nil {
			return fmt.Errorf("get payment: %w", err)
		}
		return nil
	})
	if err != nil {
		return domain.Payment{}, err
	}
	if p == nil {
		return domain.Payment{}, domain.ErrPaymentNotFound
	}
	return *p, nil
}

// paymentRow is a row of payment, as the domain reads it.
type paymentRow struct {
	ID                int64
	ClientID          string
	OrderID           int64
	CustomerID        int64
	PaymentProvider   string
	ExternalPaymentID string
	Amount            decimal.Decimal
	Currency          string
	Status            string
	CreatedAt         time.Time
	CaptureMethod     string
	CapturedAmount    decimal.NullDecimal
	PaymentMethod     sql.NullString
}

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
	charge.PaymentMethod = row.PaymentMethod.String
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
	PaymentMethod     sql.NullString
}

// targets are the row's scan targets, in the order of its columns in every
// query that reads one: the payment table's, and the clause
// payment_columns of the statement files.
func (p *nullablePaymentRow) targets() []any {
	return []any{&p.ID, &p.ClientID, &p.OrderID, &p.CustomerID, &p.PaymentProvider,
		&p.ExternalPaymentID, &p.Amount, &p.Currency, &p.Status, &p.CreatedAt, &p.CaptureMethod, &p.CapturedAmount, &p.PaymentMethod}
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
		PaymentMethod:     p.PaymentMethod,
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
