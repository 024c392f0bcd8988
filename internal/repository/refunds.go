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

// RefundStore implements app.RefundStore on the refund table. A refund's
// phase 1 and phase 3 are each one statement, of the refund's own clauses
// and the key's that every command has (statements/refund_*.sql).
//
// The refund total is payment.refund_reserved: PENDING and SUCCEEDED
// refunds count, and its CHECK keeps it within 0 and the payment's amount
// whatever a statement does.
type RefundStore struct {
	conn
}

// claimAndReserveRefundSQL is a refund's phase 1: the refund reserved
// against its payment and the key claimed, @atomic on the pool or every
// answer inside a transaction, as a charge's claim.
//
//go:embed statements/refund_claim.sql
var claimAndReserveRefundSQL string

// reserveRefundSQL is phase 1's rare path: the reservation alone, one row
// whatever happened.
//
//go:embed statements/refund_reserve.sql
var reserveRefundSQL string

// externalRefundSQL reads the refund a reservation's insert met after its
// snapshot was taken.
//
//go:embed statements/refund_external.sql
var externalRefundSQL string

// recordRefundOutcomeSQL is a refund's phase 3: the key's outcome, the
// refund's final status (a DECLINED or FAILED refund's amount given back)
// and its event, all or none.
//
//go:embed statements/refund_record.sql
var recordRefundOutcomeSQL string

// releaseRefundSQL gives a claim and its PENDING refund back, the refund's
// amount with it.
//
//go:embed statements/refund_release.sql
var releaseRefundSQL string

var (
	claimAndReserveRefundStmt = compileNamed(claimAndReserveRefundSQL)
	recordRefundOutcomeStmt   = compileNamed(recordRefundOutcomeSQL)
	releaseRefundStmt         = compileNamed(releaseRefundSQL)
	reserveRefundStmt         = compileNamed(reserveRefundSQL)
	externalRefundStmt        = compileNamed(externalRefundSQL)
)

// Claim implements app.RefundStore: claimAndReserveRefundSQL, @atomic on
// the pool.
func (s *RefundStore) Claim(ctx context.Context, k app.KeyClaim, want domain.Refund) (res app.RefundClaimed, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, claimAndReserveRefundStmt, s.claimValues(k, refundValues(k.Scope.ClientID, want)))
		if err != nil {
			return err
		}
		var recoveryPoint sql.NullInt64
		var ref nullableRefundRow
		err = row.Scan(append([]any{&res.Claimed, &res.Reserved, &recoveryPoint, &res.SagaID}, ref.targets()...)...)
		if err != nil {
			return fmt.Errorf("claim key and reserve refund: %w", err)
		}
		if err := oneRecoveryPoint(k, res.Claimed && res.Reserved, recoveryPoint, ref.ID, "refund"); err != nil {
			return err
		}
		if ref.ID.Valid {
			refund, _, err := ref.toDomain()
			if err != nil {
				return err
			}
			res.Refund = &refund
		}
		return nil
	})
	return res, err
}

// Reserve implements app.RefundStore: reserveRefundSQL, and the key's link
// to the refund when it reserved.
func (s *RefundStore) Reserve(ctx context.Context, k app.KeyClaim, want domain.Refund) (app.RefundReservation, error) {
	var res app.RefundReservation
	err := s.run(ctx, func(db *gorm.DB) error {
		var err error
		res, err = reserveRefund(ctx, db, k.Scope.ClientID, want)
		return err
	})
	if err != nil || res.Kind != app.RefundReserved {
		return res, err
	}
	// The record names the refund's payment too, as the claim does.
	return res, s.updateOwned(ctx, k, setRefundRecoveryPointStmt, map[string]any{
		"refund": int64(res.Refund.ID), "payment": int64(res.Refund.PaymentID),
	})
}

// reserveRefund reserves r for client's payment r.PaymentID
// (reserveRefundSQL), or says why not.
func reserveRefund(ctx context.Context, db *gorm.DB, client domain.ClientID, r domain.Refund) (app.RefundReservation, error) {
	row, err := queryRow(ctx, db, reserveRefundStmt, refundValues(client, r))
	if err != nil {
		return app.RefundReservation{}, err
	}
	var (
		res                               app.RefundReservation
		reserved, found, refundable, fits bool
		total                             decimal.NullDecimal
		ref                               nullableRefundRow
	)
	err = row.Scan(append([]any{&reserved, &found, &refundable, &fits, &total}, ref.targets()...)...)
	if err != nil {
		return app.RefundReservation{}, mapError(fmt.Errorf("reserve refund: %w", err))
	}
	res.RefundReserved = total.Decimal
	switch {
	case reserved:
		res.Kind = app.RefundReserved
	case !found:
		res.Kind = app.RefundPaymentNotFound
		return res, nil
	case !refundable:
		res.Kind = app.RefundPaymentNotRefundable
		return res, nil
	case ref.ID.Valid:
		res.Kind = app.RefundExternalRefundExists
	case !fits:
		res.Kind = app.RefundOverTheAmount
		return res, nil
	default:
		// It fitted, yet the insert did nothing: the external refund was
		// inserted by a statement that committed after this one's snapshot
		// was taken (the insert waited for it). A new statement sees it.
		res.Kind = app.RefundExternalRefundExists
		if ref, err = externalRefund(ctx, db, r.Provider, r.ExternalRefundID); err != nil {
			return app.RefundReservation{}, err
		}
	}
	res.Refund, res.ClientID, err = ref.toDomain()
	return res, err
}

// externalRefund reads the refund recorded under provider and external.
func externalRefund(ctx context.Context, db *gorm.DB, provider domain.ProviderName, external domain.ExternalRefundID) (nullableRefundRow, error) {
	row, err := queryRow(ctx, db, externalRefundStmt, map[string]any{
		"provider": string(provider),
		"external": string(external),
	})
	if err != nil {
		return nullableRefundRow{}, err
	}
	var ref nullableRefundRow
	err = row.Scan(ref.targets()...)
	if errors.Is(err, sql.ErrNoRows) {
		// Refund rows are deleted only with their claim, by the release:
		// what stopped the insert is there.
		return nullableRefundRow{}, fmt.Errorf("reserve refund: external refund %s:%s stopped the insert but cannot be read", provider, external)
	}
	if err != nil {
		return nullableRefundRow{}, mapError(fmt.Errorf("read external refund: %w", err))
	}
	return ref, nil
}

// Record implements app.RefundStore: recordRefundOutcomeSQL.
func (s *RefundStore) Record(ctx context.Context, rec app.RefundRecord) error {
	ev, err := newRefundOutboxRow(ctx, rec.Event, s.outbox)
	if err != nil {
		return err
	}
	r := rec.Event.Refund
	status, err := s.recordOutcome(ctx, recordRefundOutcomeStmt, rec.Key.Scope, rec.Key.Token, rec.Response, ev, map[string]any{
		"refund": int64(r.ID),
		"status": string(r.Status),
	})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record refund %d as %s: it is %s, not PENDING", r.ID, r.Status, status)
	}
	return err
}

// Release implements app.RefundStore: releaseRefundSQL.
func (s *RefundStore) Release(ctx context.Context, k app.KeyClaim, refund domain.RefundID) error {
	return s.releaseKey(ctx, releaseRefundStmt, k, map[string]any{"refund": int64(refund)})
}

// getRefundSQL reads a refund by its id, listRefundsSQL a payment's
// refunds, oldest first; each row in nullableRefundRow's columns.
const (
	getRefundSQL = `
SELECT id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status, created_at
  FROM refund
 WHERE id = @id`
	listRefundsSQL = `
SELECT id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status, created_at
  FROM refund
 WHERE payment_id = @payment
 ORDER BY id`
)

var (
	getRefundStmt   = compileNamed(getRefundSQL)
	listRefundsStmt = compileNamed(listRefundsSQL)
)

func (s *RefundStore) Get(ctx context.Context, id domain.RefundID) (domain.Refund, error) {
	refunds, err := s.list(ctx, getRefundStmt, map[string]any{"id": int64(id)})
	if err != nil {
		return domain.Refund{}, err
	}
	if len(refunds) == 0 {
		return domain.Refund{}, fmt.Errorf("refund %d: %w", id, app.ErrModificationNotFound)
	}
	return refunds[0], nil
}

func (s *RefundStore) List(ctx context.Context, payment domain.PaymentID) ([]domain.Refund, error) {
	return s.list(ctx, listRefundsStmt, map[string]any{"payment": int64(payment)})
}

// list runs q, which reads refunds.
func (s *RefundStore) list(ctx context.Context, q namedSQL, values map[string]any) ([]domain.Refund, error) {
	var refunds []domain.Refund
	err := s.run(ctx, func(db *gorm.DB) error {
		return queryRows(ctx, db, q, values, func(r row) error {
			var ref nullableRefundRow
			if err := r.Scan(ref.targets()...); err != nil {
				return err
			}
			refund, _, err := ref.toDomain()
			refunds = append(refunds, refund)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	return refunds, nil
}

// refundValues are the parameters of the clause refund_reservation for
// client's refund r.
func refundValues(client domain.ClientID, r domain.Refund) map[string]any {
	return map[string]any{
		"client":   string(client),
		"payment":  int64(r.PaymentID),
		"provider": string(r.Provider),
		"currency": string(r.Amount.Currency()),
		"amount":   r.Amount.Amount(),
		"external": string(r.ExternalRefundID),
	}
}

// nullableRefundRow is a refund read through a LEFT JOIN.
type nullableRefundRow struct {
	ID               sql.NullInt64
	PaymentID        sql.NullInt64
	ClientID         sql.NullString
	PaymentProvider  sql.NullString
	ExternalRefundID sql.NullString
	Amount           decimal.NullDecimal
	Currency         sql.NullString
	Status           sql.NullString
	CreatedAt        sql.NullTime
}

// targets are the row's fields as Scan takes them, in the order the
// statements select them: id, payment_id, client_id, payment_provider,
// external_refund_id, amount, currency, status, created_at.
func (r *nullableRefundRow) targets() []any {
	return []any{&r.ID, &r.PaymentID, &r.ClientID, &r.PaymentProvider, &r.ExternalRefundID, &r.Amount, &r.Currency, &r.Status, &r.CreatedAt}
}

// toDomain maps a refund row read whole; the row's values passed the
// table's CHECKs, so only a currency code the domain no longer accepts
// could fail here.
func (r nullableRefundRow) toDomain() (domain.Refund, domain.ClientID, error) {
	money, err := domain.NewMoney(r.Amount.Decimal, domain.Currency(r.Currency.String))
	if err != nil {
		return domain.Refund{}, "", fmt.Errorf("refund %d: %w", r.ID.Int64, err)
	}
	return domain.Refund{
		ID:               domain.RefundID(r.ID.Int64),
		PaymentID:        domain.PaymentID(r.PaymentID.Int64),
		Amount:           money,
		Provider:         domain.ProviderName(r.PaymentProvider.String),
		ExternalRefundID: domain.ExternalRefundID(r.ExternalRefundID.String),
		Status:           domain.RefundStatus(r.Status.String),
		CreatedAt:        r.CreatedAt.Time.UTC(),
	}, domain.ClientID(r.ClientID.String), nil
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
func newRefundOutboxRow(ctx context.Context, e app.RefundEvent, cfg OutboxConfig) (outboxEventRow, error) {
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

var _ app.RefundStore = (*RefundStore)(nil)
