package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// A refund's building blocks (issue 20): the reservation of a refund
// against its payment's refund total, the settling of a refund with the
// provider's decision, and the release of a reservation the provider did
// not act on, each one statement. They hold no idempotency key: the
// refund's CommandSteps compose the key's claim clause with
// reserveRefundClauses into its phase 1, and the key's completion with
// settling into its phase 3, as charges.go does for a charge. The
// standalone statements below run the clauses alone, for the tests and
// until the refund is wired onto the core.
//
// The refund total is payment.refund_reserved (migration 00015): PENDING
// and SUCCEEDED refunds count, and its CHECK keeps it within 0 and the
// payment's amount whatever a statement does.

// reserveRefundClauses are the reservation's CTE clauses, to be composed
// after WITH (and before the key's claim, which takes its lock last). They
// take @client, @payment, @provider, @currency, @amount and @external, and
// expose:
//
//   - refund_target: the payment (id, amount, refund_reserved) if it is the
//     client's, locked; with refundable (SUCCEEDED, in the refund's currency
//     and provider) and fits (the refund total stays within the amount),
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
           refund_reserved + @amount <= amount AS fits
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

// settleRefundSQL sets a PENDING refund's final status and, for DECLINED
// or FAILED, gives its amount back to the payment's refund total, in one
// statement: a refund the provider did not make stops counting exactly
// when it is recorded so. SUCCEEDED keeps its amount reserved for good.
// The core composes the key's completion and the event with it.
var settleRefundSQL = `
WITH` + lockRefundPaymentClause + `,
` + settleRefundClauses("payment_id IN (SELECT id FROM refund_payment)") + `
SELECT EXISTS (SELECT 1 FROM settled) AS done,
       (SELECT status FROM refund WHERE id = @refund) AS status_before`

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

// releaseRefundSQL gives a PENDING refund's reservation back when the
// provider did not act on it, for now (the core's GiveBack, in the
// transaction that releases the key): the row goes, so a retry reserves the
// external refund anew, and its amount stops counting, in one statement.
const releaseRefundSQL = `
WITH` + lockRefundPaymentClause + `,
-- Only a PENDING refund: a decided one is never undone.
released AS (
    DELETE FROM refund
     WHERE id = @refund AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM refund_payment)
 RETURNING payment_id, amount
),
given_back AS (
    UPDATE payment p
       SET refund_reserved = p.refund_reserved - r.amount
      FROM released r
     WHERE p.id = r.payment_id
 RETURNING p.refund_reserved
)
SELECT EXISTS (SELECT 1 FROM released) AS done,
       (SELECT status FROM refund WHERE id = @refund) AS status_before`

// lockRefundPaymentSQL takes refund @refund's payment lock alone: the
// first statement of the core's transaction that releases a refund's key
// (refundSteps.LockParents), in the order every claim takes its locks.
const lockRefundPaymentSQL = `
WITH` + lockRefundPaymentClause + `
SELECT EXISTS (SELECT 1 FROM refund_payment)`

var (
	lockRefundPaymentStmt = compileNamed(lockRefundPaymentSQL)
	reserveRefundStmt     = compileNamed(reserveRefundSQL)
	externalRefundStmt    = compileNamed(externalRefundSQL)
	settleRefundStmt      = compileNamed(settleRefundSQL)
	releaseRefundStmt     = compileNamed(releaseRefundSQL)
)

// Refunds runs a refund's building blocks on db: the pool, or a
// transaction's connection inside Transact.
type Refunds struct {
	db *gorm.DB
}

// NewRefunds returns the refund statements over db.
func NewRefunds(db *gorm.DB) *Refunds {
	return &Refunds{db: db}
}

// ReserveRefund reserves r for client's payment r.PaymentID (see
// reserveRefundClauses), or says why not.
func (s *Refunds) ReserveRefund(ctx context.Context, client domain.ClientID, r domain.Refund) (app.RefundReservation, error) {
	row, err := queryRow(ctx, s.db, reserveRefundStmt, refundValues(client, r))
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
		if ref, err = s.externalRefund(ctx, r.Provider, r.ExternalRefundID); err != nil {
			return app.RefundReservation{}, err
		}
	}
	res.Refund, res.ClientID, err = ref.toDomain()
	return res, err
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

// externalRefund reads the refund recorded under provider and external.
func (s *Refunds) externalRefund(ctx context.Context, provider domain.ProviderName, external domain.ExternalRefundID) (nullableRefundRow, error) {
	row, err := queryRow(ctx, s.db, externalRefundStmt, map[string]any{
		"provider": string(provider),
		"external": string(external),
	})
	if err != nil {
		return nullableRefundRow{}, err
	}
	var ref nullableRefundRow
	err = row.Scan(ref.targets()...)
	if errors.Is(err, sql.ErrNoRows) {
		// Refund rows are never deleted: what stopped the insert is there.
		return nullableRefundRow{}, fmt.Errorf("reserve refund: external refund %s:%s stopped the insert but cannot be read", provider, external)
	}
	if err != nil {
		return nullableRefundRow{}, mapError(fmt.Errorf("read external refund: %w", err))
	}
	return ref, nil
}

// SettleRefund records the provider's final decision on a PENDING refund
// (see settleRefundSQL). It returns an error, and changes nothing, if the
// refund is not PENDING or status is not final.
func (s *Refunds) SettleRefund(ctx context.Context, id domain.RefundID, status domain.RefundStatus) error {
	if !status.Final() {
		return fmt.Errorf("settle refund %d: %s is not a final status", id, status)
	}
	return s.onPending(ctx, settleRefundStmt, "settle refund", id, map[string]any{"refund": int64(id), "status": string(status)})
}

// LockRefundPayment locks refund id's payment (lockRefundPaymentSQL); an
// error if there is no such refund.
func (s *Refunds) LockRefundPayment(ctx context.Context, id domain.RefundID) error {
	row, err := queryRow(ctx, s.db, lockRefundPaymentStmt, map[string]any{"refund": int64(id)})
	if err != nil {
		return err
	}
	var locked bool
	if err := row.Scan(&locked); err != nil {
		return mapError(fmt.Errorf("lock refund %d's payment: %w", id, err))
	}
	if !locked {
		return fmt.Errorf("lock refund %d's payment: no such refund", id)
	}
	return nil
}

// ReleaseRefund deletes a PENDING refund and gives its amount back (see
// releaseRefundSQL). It returns an error, and changes nothing, if the
// refund is not PENDING.
func (s *Refunds) ReleaseRefund(ctx context.Context, id domain.RefundID) error {
	return s.onPending(ctx, releaseRefundStmt, "release refund", id, map[string]any{"refund": int64(id)})
}

// onPending runs a statement that acts on PENDING refund id only, and
// answers done and the refund's status before it.
func (s *Refunds) onPending(ctx context.Context, q namedSQL, what string, id domain.RefundID, values map[string]any) error {
	row, err := queryRow(ctx, s.db, q, values)
	if err != nil {
		return err
	}
	var done bool
	var before sql.NullString
	if err := row.Scan(&done, &before); err != nil {
		return mapError(fmt.Errorf("%s %d: %w", what, id, err))
	}
	switch {
	case done:
		return nil
	case !before.Valid:
		return fmt.Errorf("%s %d: no such refund", what, id)
	default:
		return fmt.Errorf("%s %d: it is %s, not PENDING", what, id, before.String)
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
