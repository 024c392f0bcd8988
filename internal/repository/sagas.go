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

// SagaStore implements app.SagaStore on the saga_step table
// (db/migrations/00021_saga_steps.sql).
type SagaStore struct {
	conn
}

// beginStepSQL records a step unless its (saga_id, step_name) is taken,
// and returns the row that stands, in one statement. DO UPDATE rather than
// DO NOTHING: a row a concurrent Begin committed after this statement's
// snapshot is returned too (DO NOTHING would return nothing, and a second
// SELECT in the same snapshot would not see it), and a Begin whose insert
// is not committed yet is waited for. The update writes what the row
// holds; xmax = 0 only on a row this statement inserted.
const beginStepSQL = `
INSERT INTO saga_step AS s (saga_id, step_name, kind, content_hash, compensates)
VALUES (@saga, @step, @kind, @hash, NULLIF(@compensates, ''))
    ON CONFLICT (saga_id, step_name) DO UPDATE SET kind = s.kind
RETURNING ` + sagaStepColumns + `, xmax = 0 AS inserted`

const sagaStepColumns = `s.saga_id, s.step_name, s.kind, s.content_hash, s.compensates, s.payment_id, s.refund_amount, s.waiting`

// fixRefundSQL sets a compensation's refund once; the refund that stands
// comes back, whichever compensation fixed it.
const fixRefundSQL = `
UPDATE saga_step AS s
   SET payment_id = coalesce(s.payment_id, @payment),
       refund_amount = coalesce(s.refund_amount, @amount),
       updated_at = now()
 WHERE saga_id = @saga AND step_name = @step AND kind = 'compensation'
RETURNING ` + sagaStepColumns

var (
	beginStepStmt  = compileNamed(beginStepSQL)
	fixRefundStmt  = compileNamed(fixRefundSQL)
	getStepStmt    = compileNamed(getStepSQL)
	setWaitingStmt = compileNamed(setWaitingSQL)
	waitingStmt    = compileNamed(waitingSQL)
)

func (s *SagaStore) Begin(ctx context.Context, rec app.SagaStepRecord) (stands app.SagaStepRecord, inserted bool, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, beginStepStmt, map[string]any{
			"saga": rec.Step.SagaID, "step": rec.Step.Name, "kind": string(rec.Kind),
			"hash": rec.ContentHash, "compensates": rec.Compensates,
		})
		if err != nil {
			return err
		}
		stands, err = scanSagaStep(row, &inserted)
		return err
	})
	if err != nil {
		return app.SagaStepRecord{}, false, fmt.Errorf("begin saga step %s: %w", rec.Step.Name, err)
	}
	return stands, inserted, nil
}

// getStepSQL reads a step's row.
const getStepSQL = `
SELECT ` + sagaStepColumns + `
  FROM saga_step s
 WHERE saga_id = @saga AND step_name = @step`

func (s *SagaStore) Get(ctx context.Context, step app.SagaStep) (rec app.SagaStepRecord, found bool, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, getStepStmt, map[string]any{"saga": step.SagaID, "step": step.Name})
		if err != nil {
			return err
		}
		rec, err = scanSagaStep(row, nil)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return app.SagaStepRecord{}, false, fmt.Errorf("read saga step %s: %w", step.Name, err)
	}
	return rec, found, nil
}

func (s *SagaStore) FixRefund(ctx context.Context, step app.SagaStep, payment domain.PaymentID, amount decimal.Decimal) (rec app.SagaStepRecord, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, fixRefundStmt, map[string]any{
			"saga": step.SagaID, "step": step.Name, "payment": int64(payment), "amount": amount,
		})
		if err != nil {
			return err
		}
		rec, err = scanSagaStep(row, nil)
		return err
	})
	if err != nil {
		return app.SagaStepRecord{}, fmt.Errorf("fix the refund of compensation %s: %w", step.Name, err)
	}
	return rec, nil
}

// setWaitingSQL marks a compensation as waiting for its step, or no
// longer; waitingSQL lists the waiting ones, longest waiting first.
const (
	setWaitingSQL = `
UPDATE saga_step
   SET waiting = @waiting, updated_at = now()
 WHERE saga_id = @saga AND step_name = @step AND kind = 'compensation' AND waiting <> @waiting`
	waitingSQL = `
SELECT ` + sagaStepColumns + `
  FROM saga_step s
 WHERE waiting
 ORDER BY updated_at
 LIMIT @limit`
)

func (s *SagaStore) SetWaiting(ctx context.Context, step app.SagaStep, waiting bool) error {
	return s.run(ctx, func(db *gorm.DB) error {
		_, err := exec(ctx, db, setWaitingStmt, map[string]any{"waiting": waiting, "saga": step.SagaID, "step": step.Name})
		return err
	})
}

func (s *SagaStore) Waiting(ctx context.Context, limit int) ([]app.SagaStepRecord, error) {
	var recs []app.SagaStepRecord
	err := s.run(ctx, func(db *gorm.DB) error {
		return queryRows(ctx, db, waitingStmt, map[string]any{"limit": limit}, func(r row) error {
			rec, err := scanSagaStep(r, nil)
			recs = append(recs, rec)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list waiting compensations: %w", err)
	}
	return recs, nil
}

// unresolvedStepsSQL counts a client's saga steps left without a reply:
// claimed keys of saga steps and waiting compensations (over its own
// partial index). "locked_until IS NOT NULL", which every IN_PROGRESS
// record meets (00001's CHECK), is the predicate of the index of claims
// in progress, ix_idempotency_record_in_progress (00023, 00024): named
// here, it lets the count read that index or the primary key, not every
// record since the cutoff by created_at.
const unresolvedStepsSQL = `
SELECT (SELECT count(*) FROM idempotency_record
         WHERE status = 'IN_PROGRESS' AND locked_until IS NOT NULL AND client_id = @client
           AND starts_with(idempotency_key, @prefix)
           AND created_at < now() - @micros * interval '1 microsecond')
     + (SELECT count(*) FROM saga_step
         WHERE waiting AND updated_at < now() - @micros * interval '1 microsecond')`

var unresolvedStepsStmt = compileNamed(unresolvedStepsSQL)

func (s *SagaStore) Unresolved(ctx context.Context, client domain.ClientID, olderThan time.Duration) (n int, err error) {
	err = s.run(ctx, func(db *gorm.DB) error {
		row, err := queryRow(ctx, db, unresolvedStepsStmt, map[string]any{
			"client": string(client), "prefix": app.SagaKeyPrefix, "micros": olderThan.Microseconds(),
		})
		if err != nil {
			return err
		}
		return row.Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count unresolved saga steps: %w", err)
	}
	return n, nil
}

// scanSagaStep reads sagaStepColumns, and inserted after them if not nil.
func scanSagaStep(r row, inserted *bool) (app.SagaStepRecord, error) {
	var (
		rec         app.SagaStepRecord
		kind        string
		compensates sql.NullString
		payment     sql.NullInt64
		amount      decimal.NullDecimal
	)
	targets := []any{&rec.Step.SagaID, &rec.Step.Name, &kind, &rec.ContentHash, &compensates, &payment, &amount, &rec.Waiting}
	if inserted != nil {
		targets = append(targets, inserted)
	}
	if err := r.Scan(targets...); err != nil {
		return app.SagaStepRecord{}, err
	}
	rec.Kind, rec.Compensates = app.SagaStepKind(kind), compensates.String
	if payment.Valid {
		id := domain.PaymentID(payment.Int64)
		rec.PaymentID = &id
	}
	if amount.Valid {
		rec.RefundAmount = &amount.Decimal
	}
	return rec, nil
}

var _ app.SagaStore = (*SagaStore)(nil)

// Outbox implements app.OutboxStore on outbox_event.
type Outbox struct {
	conn
}

// republishSQL makes the relay publish a stored response's message again:
// its row, by its eventId, marked unpublished (the relay sends it again
// and marks it anew), or, if the retention job purged it, written again.
const republishSQL = `
INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context)
VALUES (@event_id, @topic, @message_key, @event_type, CAST(@payload AS json), CAST(NULLIF(@trace_context, '') AS json))
    ON CONFLICT (event_id) DO UPDATE SET published_at = NULL`

var republishStmt = compileNamed(republishSQL)

func (s *Outbox) Republish(ctx context.Context, resp app.StoredResponse) error {
	if resp.Publish == nil || resp.Publish.EventID == uuid.Nil {
		return errors.New("republish: the response has no message")
	}
	traceContext, err := traceContextJSON(ctx)
	if err != nil {
		return err
	}
	err = s.run(ctx, func(db *gorm.DB) error {
		_, err := exec(ctx, db, republishStmt, map[string]any{
			"event_id": resp.Publish.EventID, "topic": s.outbox.RepliesTopic, "message_key": resp.Publish.Key,
			"event_type": resp.Publish.EventType, "payload": string(resp.Body), "trace_context": ptrString(traceContext),
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("republish %s: %w", resp.Publish.EventID, err)
	}
	s.outbox.wrote()
	return nil
}

var _ app.OutboxStore = (*Outbox)(nil)
