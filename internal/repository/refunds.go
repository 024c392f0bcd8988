package repository

import (
	"context"
	"database/sql"
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
// phase 1 and phase 3 are each one statement, composed of the refund's own
// clauses below and the key's clauses every command shares (keys.go);
// statements/refund.sql shows them whole.
//
// The refund total is payment.refund_reserved: PENDING and SUCCEEDED
// refunds count, and its CHECK keeps it within 0 and the payment's amount
// whatever a statement does.
type RefundStore struct {
	conn
}

// reserveRefundClauses are the reservation's CTE clauses, to be composed
// after WITH (and before the key's claim, which takes its lock last). They
// take @client, @payment, @provider, @currency, @amount and @external, and
// expose:
//
//   - refund_target: the payment (id, amount, refund_reserved) if it is the
//     client's, locked; with refundable (SUCCEEDED, in the refund's currency
//     and provider) and fits (the refund total stays within what the
//     payment took: a two-step payment's capture, else its amount),
//     both read from the payment as it is once locked;
//   - reserved: the PENDING refund row inserted (all refund columns), or no
//     row: the claim's recovery point, as charges.go's reserved is;
//   - refund_counted: the payment's refund_reserved after the reservation,
//     one row exactly when reserved has one;
//   - refund_existing: the refund already recorded under the external refund
//     id, as the statement's snapshot sees it. When reserved is empty
//     although refund_target is refundable and fits, the insert met a row
//     committed after the snapshot, which only a new statement sees
//     (ReserveRefund reads it with externalRefundSQL).
const reserveRefundClauses = `
-- The payment to refund, if it is the calling client's, locked before
-- anything else is written (the lock order of every command: payment
-- first). Under READ COMMITTED a lock that had to wait returns the row as
-- the previous holder committed it, so refundable and fits are computed on
-- the current refund total: concurrent refunds of one payment queue here,
-- and each sees what those before it reserved. NO KEY UPDATE is the lock
-- the UPDATE below takes anyway; it leaves foreign-key checks (KEY SHARE)
-- of rows that reference the payment free to go on.
refund_target AS MATERIALIZED (
    SELECT id, amount, refund_reserved,
           status = 'SUCCEEDED' AND currency = @currency AND payment_provider = @provider AS refundable,
           refund_reserved + @amount <= coalesce(captured_amount, amount) AS fits
      FROM payment
     WHERE id = @payment AND client_id = @client
       FOR NO KEY UPDATE
),
-- Insert the PENDING refund, only for a refundable payment whose refund
-- total has room for it. DO NOTHING on a conflict with the refund's second
-- layer, UNIQUE (payment_provider, external_refund_id): a concurrent insert
-- of the same external refund is waited for, never a second row, and no
-- error aborts a transaction the statement runs in.
reserved AS (
    INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
    SELECT id, @client, @provider, @external, @amount, @currency, 'PENDING'
      FROM refund_target
     WHERE refundable AND fits
        ON CONFLICT (payment_provider, external_refund_id) DO NOTHING
 RETURNING *
),
-- Add the refund to the payment's total only for a refund row actually
-- inserted: an external refund that exists reserves nothing. The row is
-- the one refund_target locked; the CHECK on refund_reserved is the
-- backstop should fits ever be wrong. The new total is the locked row's
-- (t), the one fits was computed on. This UPDATE's own scan of payment
-- reads the statement's snapshot, which after a wait for the lock is older
-- than the row; PostgreSQL checks the CHECK on the new row computed from
-- it before it meets the concurrent update and recomputes, so a
-- reservation that waited while a decline gave 100.00 back failed with
-- 100.00 + 100.00 > amount (TestRefundReservedAfterWaitingForADecline;
-- after a release or a decline: TestReservationAfterAWaitedGiveBack).
refund_counted AS (
    UPDATE payment p
       SET refund_reserved = t.refund_reserved + r.amount
      FROM reserved r, refund_target t
     WHERE p.id = r.payment_id AND t.id = r.payment_id
 RETURNING p.refund_reserved
),
-- The external refund as already recorded, whoever's it is: the caller
-- answers a retry of the same refund with it, and anything else as a
-- conflict that reveals nothing.
refund_existing AS (
    SELECT * FROM refund
     WHERE payment_provider = @provider AND external_refund_id = @external
)`

// reserveRefundSQL runs the reservation alone, one row whatever happened.
const reserveRefundSQL = `
WITH` + reserveRefundClauses + `,
refund_row AS (
    SELECT * FROM reserved
     UNION ALL
    SELECT * FROM refund_existing
     WHERE NOT EXISTS (SELECT 1 FROM reserved)
)
SELECT EXISTS (SELECT 1 FROM reserved) AS reserved,
       EXISTS (SELECT 1 FROM refund_target) AS payment_found,
       coalesce((SELECT refundable FROM refund_target), false) AS refundable,
       coalesce((SELECT fits FROM refund_target), false) AS fits,
       coalesce((SELECT refund_reserved FROM refund_counted), (SELECT refund_reserved FROM refund_target)) AS refund_reserved,
       r.id, r.payment_id, r.client_id, r.payment_provider, r.external_refund_id, r.amount, r.currency, r.status
  FROM (SELECT 1) AS one
  LEFT JOIN refund_row r ON true`

// externalRefundSQL reads an external refund by its second layer's key:
// the row that a reservation's insert met after its snapshot was taken.
const externalRefundSQL = `
SELECT id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status
  FROM refund
 WHERE payment_provider = @provider AND external_refund_id = @external`

// lockRefundPaymentClause locks the payment of refund @refund first, as
// the reservation locks it: every statement that writes a refund takes the
// payment's lock before the refund's. It exposes refund_payment (id).
const lockRefundPaymentClause = `
refund_payment AS MATERIALIZED (
    SELECT p.id
      FROM payment p
      JOIN refund r ON r.payment_id = p.id
     WHERE r.id = @refund
       FOR NO KEY UPDATE OF p
)`

// settleRefundClauses are the clauses "settled" and "given_back": refund
// @refund's decision, @status, once: only a PENDING refund, only to a final
// status, and only when guard holds (its payment is locked first; in phase
// 3, the key is completed too). Two settlings of one refund queue on the
// payment's lock, and the second finds it no longer PENDING. A refund not
// made gives its amount back, with its status. The payment's updated_at
// stays: it says when the payment's own status changed.
func settleRefundClauses(guard string) string {
	return `settled AS (
    UPDATE refund
       SET status = @status, updated_at = now()
     WHERE id = @refund AND status = 'PENDING'
       AND @status IN ('SUCCEEDED', 'DECLINED', 'FAILED')
       AND ` + guard + `
 RETURNING payment_id, amount, status
),
given_back AS (
    UPDATE payment p
       SET refund_reserved = p.refund_reserved - s.amount
      FROM settled s
     WHERE p.id = s.payment_id AND s.status IN ('DECLINED', 'FAILED')
 RETURNING p.refund_reserved
)`
}

// claimAndReserveRefundSQL is a refund's phase 1 in one statement, run as
// claimAndReserveSQL is: @atomic on the pool, committing only a claimed key
// with a PENDING refund to make, and raising charge_needs_transaction's
// error (one function for every command's phase 1) for any other answer;
// or in a transaction, returning every answer.
//
// Lock order (docs/adding-a-command.md): the payment (refund_target), then
// the refund row it inserts (reserved), then the key (claimed), whose
// recovery point is the refund (refund_id). The record names the refund's
// payment too (payment_id), so that an older release's jobs never take it
// for a charge that reserved nothing (docs/decisions/0022).
var claimAndReserveRefundSQL = `
WITH` + reserveRefundClauses + `,
` + claimKeyClause(app.CommandRefund, "refund_id", "payment_id", "") + `,
` + goesOnWithClause("refund_row", "refund", "f", "refund_id") + `
SELECT ` + claimAnswers("refund_id") + `,
       (SELECT o.saga_id FROM order_projection o JOIN payment p ON p.order_id = o.order_id
         WHERE p.id = @payment) AS saga_id,
       f.id, f.payment_id, f.client_id, f.payment_provider, f.external_refund_id, f.amount, f.currency, f.status
  FROM (SELECT 1) AS one
  LEFT JOIN refund_row f ON true
-- On its own (atomic), keep only a claimed key with a PENDING refund, which
-- is its recovery point; any other answer raises, and the error rolls back
-- everything above (the refund total's increase too).
 WHERE ` + onlyTheUsualAnswer("f", "refund_id", "")

// recordRefundOutcomeSQL is a refund's phase 3 in one statement: the key's
// outcome, the refund's final status (a DECLINED or FAILED refund gives its
// amount back to the payment's refund total) and the event, all or none.
// Lock order: the payment first (refund_payment), then the refund
// (refund_locked), then the key (completed, whose guard reads
// refund_locked): a takeover's phase 1 takes the same order, so the old
// owner's phase 3 and a new owner's phase 1 never wait on each other in a
// cycle.
var recordRefundOutcomeSQL = `
WITH` + lockRefundPaymentClause + `,
refund_locked AS MATERIALIZED (
    SELECT id
      FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM refund_payment)
       FOR NO KEY UPDATE
),
` + completeKeyClause("EXISTS (SELECT 1 FROM refund_locked)") + `,
` + settleRefundClauses("EXISTS (SELECT 1 FROM completed)") + `,
` + announceClause("settled") + `,
` + replyClause("announced") + `
SELECT ` + recordedAndLockHeld + `,
       (SELECT status FROM refund WHERE id = @refund) AS refund_status`

// releaseRefundSQL gives a claim and its PENDING refund back, in one
// statement, in the lock order of the claim: the payment first (locked,
// with its refund total as the lock returns it), then the key (released,
// fenced by the token), then the refund, whose amount stops counting.
var releaseRefundSQL = `
WITH
refund_payment AS MATERIALIZED (
    SELECT p.id, p.refund_reserved
      FROM payment p
      JOIN refund r ON r.payment_id = p.id
     WHERE r.id = @refund
       FOR NO KEY UPDATE OF p
),
` + releaseKeyClause("refund_id", "EXISTS (SELECT 1 FROM refund_payment)") + `,
-- Only a PENDING refund, and only the one the released key names.
removed AS (
    DELETE FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND id IN (SELECT refund_id FROM released)
 RETURNING payment_id, amount
),
-- The new total is the locked row's: a statement that waited for the
-- lock reads its other rows as they were before the wait.
given_back AS (
    UPDATE payment p
       SET refund_reserved = t.refund_reserved - r.amount
      FROM removed r, refund_payment t
     WHERE p.id = r.payment_id AND t.id = r.payment_id
)
SELECT EXISTS (SELECT 1 FROM released)`

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
	return res, s.updateOwned(ctx, k.Scope, k.Token, map[string]any{
		"refund_id":  int64(res.Refund.ID),
		"payment_id": int64(res.Refund.PaymentID),
		"updated_at": gorm.Expr("now()"),
	})
}

// reserveRefund reserves r for client's payment r.PaymentID (see
// reserveRefundClauses), or says why not.
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

func (s *RefundStore) Get(ctx context.Context, id domain.RefundID) (domain.Refund, error) {
	refunds, err := s.list(ctx, "id = ?", int64(id))
	if err != nil {
		return domain.Refund{}, err
	}
	if len(refunds) == 0 {
		return domain.Refund{}, fmt.Errorf("refund %d: no such refund", id)
	}
	return refunds[0], nil
}

func (s *RefundStore) List(ctx context.Context, payment domain.PaymentID) ([]domain.Refund, error) {
	return s.list(ctx, "payment_id = ?", int64(payment))
}

func (s *RefundStore) list(ctx context.Context, where string, arg any) ([]domain.Refund, error) {
	var rows []nullableRefundRow
	err := s.run(ctx, func(db *gorm.DB) error {
		return db.WithContext(ctx).Table("refund").
			Select("id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status").
			Where(where, arg).Order("id").Scan(&rows).Error
	})
	if err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	refunds := make([]domain.Refund, len(rows))
	for i, row := range rows {
		if refunds[i], _, err = row.toDomain(); err != nil {
			return nil, err
		}
	}
	return refunds, nil
}

// refundValues are reserveRefundClauses' parameters for client's refund r.
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
}

// targets are the row's fields as Scan takes them, in the order the
// statements select them: id, payment_id, client_id, payment_provider,
// external_refund_id, amount, currency, status.
func (r *nullableRefundRow) targets() []any {
	return []any{&r.ID, &r.PaymentID, &r.ClientID, &r.PaymentProvider, &r.ExternalRefundID, &r.Amount, &r.Currency, &r.Status}
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
