package repository

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The order-projection consumer writes a whole batch with one statement per
// table. Each statement takes its rows as PostgreSQL arrays (@ids::uuid[])
// and unnests them, so a batch of 500 events is two statements with a
// fixed SQL text (prepared once per connection), not 1,000 round trips or
// a SQL text that changes with the batch size: pgx encodes the Go slices
// as arrays.

// ProcessedEvents implements app.ProcessedEvents on processed_event.
type ProcessedEvents struct {
	conn
}

// markProcessedSQL is R-DIST-IDEM-2's tryMarkProcessed for a whole batch:
// the rows that RETURNING names are the new events; a conflict means the
// event was processed before by this consumer. The key is the pair
// (event_id, consumer_name): another consumer's rows, such as those of the group a
// projection is being rebuilt from, never make this one skip an event. ON
// CONFLICT DO NOTHING waits for a concurrent transaction that inserted the
// same pair and then yields no row for it, so two members of one consumer
// group never both apply an event.
const markProcessedSQL = `
INSERT INTO processed_event (event_id, consumer_name)
SELECT id, @consumer FROM unnest(@ids::uuid[]) WITH ORDINALITY AS t (id, n) ORDER BY n
ON CONFLICT (event_id, consumer_name) DO NOTHING
RETURNING event_id`

var (
	markProcessedStmt = compileNamed(markProcessedSQL)
	upsertNewerStmt   = compileNamed(upsertNewerSQL)
)

func (s *ProcessedEvents) MarkProcessed(ctx context.Context, consumer string, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	fresh := make(map[uuid.UUID]bool, len(ids))
	if len(ids) == 0 {
		return fresh, nil
	}
	arg := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		arg[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	err := s.run(ctx, func(db *gorm.DB) error {
		err := queryRows(ctx, db, markProcessedStmt, map[string]any{"ids": arg, "consumer": consumer}, func(r row) error {
			var id pgtype.UUID
			if err := r.Scan(&id); err != nil {
				return err
			}
			fresh[uuid.UUID(id.Bytes)] = true
			return nil
		})
		if err != nil {
			return fmt.Errorf("mark events processed: %w", err)
		}
		return nil
	})
	return fresh, err
}

// upsertNewerSQL writes each order unless the stored row carries a version
// at least as new: an older or repeated event never
// overwrites newer state, whatever order events arrive in. A row with no
// version (seeded, not written by an event) is older than any event.
const upsertNewerSQL = `
INSERT INTO order_projection AS p
       (order_id, customer_id, amount, currency, saga_id, last_event_at, last_event_id, updated_at)
SELECT o, c, a, cur, s, at, e, now()
  FROM unnest(@orders::bigint[], @customers::bigint[], @amounts::numeric[], @currencies::text[], @sagas::uuid[], @at::timestamptz[], @event_ids::uuid[])
       AS t (o, c, a, cur, s, at, e)
ORDER BY o
ON CONFLICT (order_id) DO UPDATE SET
       customer_id   = EXCLUDED.customer_id,
       amount        = EXCLUDED.amount,
       currency      = EXCLUDED.currency,
       saga_id       = EXCLUDED.saga_id,
       last_event_at = EXCLUDED.last_event_at,
       last_event_id = EXCLUDED.last_event_id,
       updated_at    = now()
 WHERE p.last_event_at IS NULL
    OR (p.last_event_at, p.last_event_id) < (EXCLUDED.last_event_at, EXCLUDED.last_event_id)`

func (s *OrderStore) UpsertNewer(ctx context.Context, events []app.OrderCreated) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n := len(events)
	orders, customers := make([]int64, n), make([]int64, n)
	amounts, currencies := make([]string, n), make([]string, n)
	sagas, eventIDs := make([]pgtype.UUID, n), make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	for i, e := range events {
		orders[i] = int64(e.Order.ID)
		customers[i] = int64(e.Order.CustomerID)
		amounts[i] = e.Order.Total.Amount().String()
		currencies[i] = string(e.Order.Total.Currency())
		sagas[i] = pgtype.UUID{Bytes: e.SagaID.UUID, Valid: e.SagaID.Valid}
		at[i] = e.OccurredAt
		eventIDs[i] = pgtype.UUID{Bytes: e.EventID, Valid: true}
	}
	var written int64
	err := s.run(ctx, func(db *gorm.DB) error {
		var err error
		written, err = exec(ctx, db, upsertNewerStmt, map[string]any{
			"orders": orders, "customers": customers, "amounts": amounts, "currencies": currencies,
			"sagas": sagas, "at": at, "event_ids": eventIDs,
		})
		if err != nil {
			return fmt.Errorf("upsert order projection: %w", err)
		}
		return nil
	})
	return int(written), err
}

func (s *OrderStore) GetVisibleTo(ctx context.Context, id domain.OrderID, client domain.ClientID) (app.OrderProjection, error) {
	var row orderProjectionRow
	err := s.run(ctx, func(db *gorm.DB) (err error) {
		row, err = getOrderRow(ctx, db, getOrderVisibleToStmt, map[string]any{"order": int64(id), "client": string(client)})
		return err
	})
	if err != nil {
		return app.OrderProjection{}, err
	}
	order, err := row.toDomain()
	if err != nil {
		return app.OrderProjection{}, err
	}
	p := app.OrderProjection{Order: order, SagaID: row.SagaID, UpdatedAt: row.UpdatedAt.UTC()}
	if row.LastEventAt.Valid && row.LastEventID.Valid {
		p.LastEvent = &app.EventVersion{OccurredAt: row.LastEventAt.Time.UTC(), EventID: row.LastEventID.UUID}
	}
	return p, nil
}

var (
	_ app.ProcessedEvents = (*ProcessedEvents)(nil)
	_ app.OrderStore      = (*OrderStore)(nil)
)
