package repository

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// TransitionStore implements app.TransitionStore on payment_transition
// (db/migrations/00022_two_step_payments.sql): the captures and voids of
// authorized payments, each phase one statement of the transition's own
// clauses and the key's (keys.go). The lock order is a refund's: the
// payment, then the transition, then the key.
type TransitionStore struct {
	conn
}

// transitionColumns are a transition's columns, in the order of
// nullableTransitionRow.targets.
const transitionColumns = `id, payment_id, kind, amount, currency, reference, status`

// claimTransitionSQL is phase 1 in one statement, @atomic on the pool as
// a charge's (charges.go says why). The payment is locked first: two
// transitions of one payment queue there, and the second's insert then
// meets the first's row in ux_payment_transition_one_winner and inserts
// nothing (DO NOTHING: the index is the judge, and no error aborts a
// transaction the statement runs in).
var claimTransitionSQL = `
WITH
-- The payment, if it is the client's, locked before anything is written.
transition_payment AS MATERIALIZED (
    SELECT id, status, capture_method
      FROM payment
     WHERE id = @payment AND client_id = @client
       FOR NO KEY UPDATE
),
-- The PENDING transition, only of an authorized two-step payment, and only
-- if no other transition of it is PENDING or SUCCEEDED.
reserved AS (
    INSERT INTO payment_transition (payment_id, client_id, kind, amount, currency, reference, provider_key, status)
    SELECT id, @client, @kind, CAST(@amount AS numeric), CAST(NULLIF(@currency, '') AS char(3)), NULLIF(@reference, ''), @provider_key, 'PENDING'
      FROM transition_payment
     WHERE status = 'AUTHORIZED' AND capture_method = 'manual'
        ON CONFLICT DO NOTHING
 RETURNING *
),
` + claimKeyClause("{command}", "transition_id", "payment_id", "") + `,
` + goesOnWithClause("transitioned", "payment_transition", "t", "transition_id") + `
SELECT ` + claimAnswers("transition_id") + `,
       t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status
  FROM (SELECT 1) AS one
  LEFT JOIN transitioned t ON true
 WHERE ` + onlyTheUsualAnswer("t", "transition_id", "")

// blockingTransitionSQL reads, in a snapshot of its own, what kept a
// claim from reserving: the payment's status and the transition that won.
const blockingTransitionSQL = `
SELECT p.status, t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status
  FROM payment p
  LEFT JOIN payment_transition t ON t.payment_id = p.id AND t.status IN ('PENDING', 'SUCCEEDED')
 WHERE p.id = ?`

// lockTransitionPaymentClause locks the payment of transition @transition
// first, as the claim does. It exposes transition_payment (id).
const lockTransitionPaymentClause = `
transition_payment AS MATERIALIZED (
    SELECT p.id
      FROM payment p
      JOIN payment_transition t ON t.payment_id = p.id
     WHERE t.id = @transition
       FOR NO KEY UPDATE OF p
)`

// recordTransitionSQL is phase 3 in one statement: the key completed,
// the transition's final status, on an approval the payment's (its status
// @payment_status, a capture's amount taken), and the event.
var recordTransitionSQL = `
WITH` + lockTransitionPaymentClause + `,
transition_locked AS MATERIALIZED (
    SELECT id
      FROM payment_transition
     WHERE id = @transition AND status = 'PENDING'
       AND payment_id IN (SELECT id FROM transition_payment)
       FOR NO KEY UPDATE
),
` + completeKeyClause("EXISTS (SELECT 1 FROM transition_locked)") + `,
settled AS (
    UPDATE payment_transition
       SET status = @status, updated_at = now()
     WHERE id = @transition AND status = 'PENDING'
       AND EXISTS (SELECT 1 FROM completed)
 RETURNING payment_id, kind, amount
),
-- Only an approval moves the payment on, and only an AUTHORIZED one: the
-- one-winner index lets no second transition get this far.
moved AS (
    UPDATE payment p
       SET status = @payment_status,
           captured_amount = CASE WHEN s.kind = 'capture' THEN s.amount ELSE p.captured_amount END,
           updated_at = now()
      FROM settled s
     WHERE p.id = s.payment_id AND @status = 'SUCCEEDED' AND p.status = 'AUTHORIZED'
),
` + announceClause("settled") + `,
` + replyClause("announced") + `
SELECT ` + recordedAndLockHeld + `,
       (SELECT status FROM payment_transition WHERE id = @transition) AS transition_status`

// releaseTransitionSQL gives a claim and its PENDING transition back, in
// the claim's lock order.
var releaseTransitionSQL = `
WITH` + lockTransitionPaymentClause + `,
` + releaseKeyClause("transition_id", "EXISTS (SELECT 1 FROM transition_payment)") + `,
removed AS (
    DELETE FROM payment_transition
     WHERE id = @transition AND status = 'PENDING'
       AND id IN (SELECT transition_id FROM released)
)
SELECT EXISTS (SELECT 1 FROM released)`

var (
	claimTransitionStmts = map[app.CommandName]namedSQL{
		app.CommandCapture: compileNamed(commandNamed(claimTransitionSQL, app.CommandCapture)),
		app.CommandVoid:    compileNamed(commandNamed(claimTransitionSQL, app.CommandVoid)),
	}
	recordTransitionStmt  = compileNamed(recordTransitionSQL)
	releaseTransitionStmt = compileNamed(releaseTransitionSQL)
)

// commandNamed is q for command: the claim names its command as a
// literal, as every command's claim does.
func commandNamed(q string, command app.CommandName) string {
	return strings.ReplaceAll(q, "{command}", string(command))
}

func (s *TransitionStore) Claim(ctx context.Context, k app.KeyClaim, command app.CommandName, want domain.Transition, providerKey string) (res app.TransitionClaimed, err error) {
	stmt, ok := claimTransitionStmts[command]
	if !ok {
		return res, fmt.Errorf("claim a transition: unknown command %q", command)
	}
	values := map[string]any{
		"client": string(k.Scope.ClientID), "payment": int64(want.PaymentID), "kind": string(want.Kind),
		"amount": nil, "currency": "", "reference": want.Reference, "provider_key": providerKey,
	}
	if want.Kind == domain.TransitionCapture {
		values["amount"], values["currency"] = want.Amount.Amount(), string(want.Amount.Currency())
	}
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, stmt, s.claimValues(k, values))
		if err != nil {
			return err
		}
		var recoveryPoint sql.NullInt64
		var t nullableTransitionRow
		if err := row.Scan(append([]any{&res.Claimed, &res.Reserved, &recoveryPoint}, t.targets()...)...); err != nil {
			return fmt.Errorf("claim key and reserve %s: %w", want.Kind, err)
		}
		if err := oneRecoveryPoint(k, res.Claimed && res.Reserved, recoveryPoint, t.ID, string(want.Kind)); err != nil {
			return err
		}
		res.Transition, err = reservedOrNil(t.ID, t.toDomain)
		return err
	})
	return res, err
}

func (s *TransitionStore) Blocking(ctx context.Context, payment domain.PaymentID) (status domain.PaymentStatus, winner *domain.Transition, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		var ps string
		var t nullableTransitionRow
		if err := db.WithContext(ctx).Raw(blockingTransitionSQL, int64(payment)).Row().Scan(append([]any{&ps}, t.targets()...)...); err != nil {
			return fmt.Errorf("read what blocks a transition of payment %d: %w", payment, err)
		}
		status = domain.PaymentStatus(ps)
		if t.ID.Valid {
			tr, err := t.toDomain()
			if err != nil {
				return err
			}
			winner = &tr
		}
		return nil
	})
	return status, winner, err
}

func (s *TransitionStore) Record(ctx context.Context, rec app.TransitionRecord) error {
	ev, err := newPaymentOutboxRow(ctx, rec.Event, s.outbox)
	if err != nil {
		return err
	}
	t := rec.Event.Transition
	status, err := s.recordOutcome(ctx, recordTransitionStmt, rec.Key.Scope, rec.Key.Token, rec.Response, ev, map[string]any{
		"transition":     int64(t.ID),
		"status":         string(t.Status),
		"payment_status": string(rec.PaymentStatus),
	})
	if errors.Is(err, errNotPending) {
		return fmt.Errorf("record %s %d as %s: it is %s, not PENDING", t.Kind, t.ID, t.Status, status)
	}
	return err
}

func (s *TransitionStore) Release(ctx context.Context, k app.KeyClaim, t domain.TransitionID) error {
	return s.releaseKey(ctx, releaseTransitionStmt, k, map[string]any{"transition": int64(t)})
}

func (s *TransitionStore) Get(ctx context.Context, id domain.TransitionID) (domain.Transition, error) {
	var t nullableTransitionRow
	err := s.run(ctx, func(db *gorm.DB) error {
		err := db.WithContext(ctx).Raw(`SELECT `+transitionColumns+` FROM payment_transition WHERE id = ?`, int64(id)).Row().Scan(t.targets()...)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("transition %d: %w", id, gorm.ErrRecordNotFound)
		}
		return err
	})
	if err != nil {
		return domain.Transition{}, err
	}
	return t.toDomain()
}

// listAuthorizedSQL lists the expiry job's candidates over
// ix_payment_authorized.
var listAuthorizedSQL = `
SELECT p.id, ` + paymentColumns("p") + `
  FROM payment p
 WHERE p.is_authorized AND p.created_at < now() - @micros * interval '1 microsecond'
   AND NOT EXISTS (SELECT 1 FROM payment_transition t WHERE t.payment_id = p.id AND t.status = 'PENDING')
 ORDER BY p.created_at
 LIMIT @limit`

// expireSQL records a lapsed hold: the payment EXPIRED and its event, in
// one statement, only while it is AUTHORIZED with nothing in flight (a
// capture or void reserved since holds the payment's lock or its row).
var expireSQL = `
WITH
expired AS (
    UPDATE payment p
       SET status = 'EXPIRED', updated_at = now()
     WHERE p.id = @payment_id AND p.status = 'AUTHORIZED'
       AND NOT EXISTS (SELECT 1 FROM payment_transition t WHERE t.payment_id = p.id AND t.status = 'PENDING')
 RETURNING p.id
),
` + announceClause("expired") + `
SELECT EXISTS (SELECT 1 FROM announced)`

var (
	listAuthorizedStmt = compileNamed(listAuthorizedSQL)
	expireStmt         = compileNamed(expireSQL)
)

func (s *TransitionStore) ListAuthorized(ctx context.Context, olderThan time.Duration, limit int) ([]domain.Payment, error) {
	var out []domain.Payment
	err := s.run(ctx, func(db *gorm.DB) error {
		args, err := listAuthorizedStmt.args(map[string]any{"micros": olderThan.Microseconds(), "limit": limit})
		if err != nil {
			return err
		}
		rows, err := db.Statement.ConnPool.QueryContext(ctx, listAuthorizedStmt.text, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var p nullablePaymentRow
			if err := rows.Scan(p.targets()...); err != nil {
				return err
			}
			payment, err := p.toDomain()
			if err != nil {
				return err
			}
			out = append(out, payment)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list authorized payments: %w", err)
	}
	return out, nil
}

func (s *TransitionStore) Expire(ctx context.Context, e app.PaymentEvent) (expired bool, err error) {
	ev, err := newPaymentOutboxRow(ctx, e, s.outbox)
	if err != nil {
		return false, err
	}
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, expireStmt, map[string]any{
			"payment_id": int64(e.Payment.ID), "event_id": ev.EventID, "topic": ev.Topic, "message_key": ev.MessageKey,
			"event_type": ev.EventType, "payload": ev.Payload, "trace_context": ptrString(ev.TraceContext),
		})
		if err != nil {
			return err
		}
		return row.Scan(&expired)
	})
	if err != nil {
		return false, fmt.Errorf("expire payment %d: %w", e.Payment.ID, err)
	}
	if expired {
		s.outbox.wrote()
	}
	return expired, nil
}

// nullableTransitionRow is a transition read through a LEFT JOIN.
type nullableTransitionRow struct {
	ID        sql.NullInt64
	PaymentID sql.NullInt64
	Kind      sql.NullString
	Amount    decimal.NullDecimal
	Currency  sql.NullString
	Reference sql.NullString
	Status    sql.NullString
}

// targets are the row's fields in transitionColumns' order.
func (t *nullableTransitionRow) targets() []any {
	return []any{&t.ID, &t.PaymentID, &t.Kind, &t.Amount, &t.Currency, &t.Reference, &t.Status}
}

func (t nullableTransitionRow) toDomain() (domain.Transition, error) {
	tr := domain.Transition{
		ID:        domain.TransitionID(t.ID.Int64),
		PaymentID: domain.PaymentID(t.PaymentID.Int64),
		Kind:      domain.TransitionKind(t.Kind.String),
		Reference: t.Reference.String,
		Status:    domain.PaymentStatus(t.Status.String),
	}
	if t.Amount.Valid {
		m, err := domain.NewMoney(t.Amount.Decimal, domain.Currency(t.Currency.String))
		if err != nil {
			return domain.Transition{}, fmt.Errorf("transition %d: %w", t.ID.Int64, err)
		}
		tr.Amount = m
	}
	return tr, nil
}

var _ app.TransitionStore = (*TransitionStore)(nil)
