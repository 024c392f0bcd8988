package repository

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// TransitionStore implements app.TransitionStore on payment_transition
// (db/migrations/00022_two_step_payments.sql): the captures and voids of
// authorized payments, each phase one statement of the transition's own
// clauses and the key's (statements/capture_claim.sql, void_claim.sql,
// transition_*.sql). The lock order is a refund's: the payment, then the
// transition, then the key.
type TransitionStore struct {
	conn
}

// claimCaptureSQL and claimVoidSQL are a capture's and a void's phase 1:
// the transition reserved on its AUTHORIZED payment, one winner per
// payment, and the key claimed, @atomic on the pool or every answer inside
// a transaction, as a charge's claim. They are one statement, each naming
// its own command.
var (
	//go:embed statements/capture_claim.sql
	claimCaptureSQL string
	//go:embed statements/void_claim.sql
	claimVoidSQL string
)

// blockingTransitionSQL reads, in a snapshot of its own, what kept a
// claim from reserving: the payment's status and the transition that won.
const blockingTransitionSQL = `
SELECT p.status, t.id, t.payment_id, t.kind, t.amount, t.currency, t.reference, t.status
  FROM payment p
  LEFT JOIN payment_transition t ON t.payment_id = p.id AND t.status IN ('PENDING', 'SUCCEEDED')
 WHERE p.id = @payment`

// getTransitionSQL reads a transition by its id, in
// nullableTransitionRow's columns.
const getTransitionSQL = `
SELECT id, payment_id, kind, amount, currency, reference, status
  FROM payment_transition
 WHERE id = @id`

// recordTransitionSQL is a capture's or a void's phase 3: the key
// completed, the transition's final status, on an approval the payment's,
// and the event.
//
//go:embed statements/transition_record.sql
var recordTransitionSQL string

// releaseTransitionSQL gives a claim and its PENDING transition back.
//
//go:embed statements/transition_release.sql
var releaseTransitionSQL string

var (
	claimTransitionStmts = map[app.CommandName]namedSQL{
		app.CommandCapture: compileNamed(claimCaptureSQL),
		app.CommandVoid:    compileNamed(claimVoidSQL),
	}
	recordTransitionStmt   = compileNamed(recordTransitionSQL)
	releaseTransitionStmt  = compileNamed(releaseTransitionSQL)
	blockingTransitionStmt = compileNamed(blockingTransitionSQL)
	getTransitionStmt      = compileNamed(getTransitionSQL)
)

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
		r, err := queryRow(ctx, db, blockingTransitionStmt, map[string]any{"payment": int64(payment)})
		if err == nil {
			err = r.Scan(append([]any{&ps}, t.targets()...)...)
		}
		if err != nil {
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
		r, err := queryRow(ctx, db, getTransitionStmt, map[string]any{"id": int64(id)})
		if err == nil {
			err = r.Scan(t.targets()...)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("transition %d: %w: %w", id, app.ErrModificationNotFound, gorm.ErrRecordNotFound)
		}
		return err
	})
	if err != nil {
		return domain.Transition{}, err
	}
	return t.toDomain()
}

// listAuthorizedSQL lists the expiry job's candidates.
//
//go:embed statements/payment_list_authorized.sql
var listAuthorizedSQL string

// expireSQL records a lapsed hold: the payment EXPIRED and its event.
//
//go:embed statements/payment_expire.sql
var expireSQL string

var (
	listAuthorizedStmt = compileNamed(listAuthorizedSQL)
	expireStmt         = compileNamed(expireSQL)
)

func (s *TransitionStore) ListAuthorized(ctx context.Context, olderThan time.Duration, limit int) ([]domain.Payment, error) {
	var out []domain.Payment
	err := s.run(ctx, func(db *gorm.DB) error {
		return queryRows(ctx, db, listAuthorizedStmt, map[string]any{"micros": olderThan.Microseconds(), "limit": limit}, func(r row) error {
			var p nullablePaymentRow
			if err := r.Scan(p.targets()...); err != nil {
				return err
			}
			payment, err := p.toDomain()
			out = append(out, payment)
			return err
		})
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

// targets are the row's fields in the order every statement that reads a
// transition selects them.
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
