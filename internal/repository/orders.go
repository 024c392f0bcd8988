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

	"github.com/example/payment-service/internal/domain"
)

// OrderStore implements app.OrderStore on the order_projection table.
type OrderStore struct {
	conn
}

// orderProjectionRow is a row of order_projection, in the columns the
// statements below select.
type orderProjectionRow struct {
	OrderID     int64
	CustomerID  int64
	Amount      decimal.Decimal
	Currency    string
	SagaID      uuid.NullUUID
	LastEventAt sql.NullTime
	LastEventID uuid.NullUUID
	UpdatedAt   time.Time
}

func (row *orderProjectionRow) targets() []any {
	return []any{&row.OrderID, &row.CustomerID, &row.Amount, &row.Currency, &row.SagaID, &row.LastEventAt, &row.LastEventID, &row.UpdatedAt}
}

// getOrderSQL reads an order; getOrderVisibleToSQL the same only if the
// client has a payment for it (GetOrder's visibility rule), which the index
// ix_payment_order_client serves.
const (
	getOrderSQL = `
SELECT order_id, customer_id, amount, currency, saga_id, last_event_at, last_event_id, updated_at
  FROM order_projection
 WHERE order_id = @order`
	getOrderVisibleToSQL = `
SELECT order_id, customer_id, amount, currency, saga_id, last_event_at, last_event_id, updated_at
  FROM order_projection o
 WHERE order_id = @order
   AND EXISTS (SELECT 1 FROM payment p WHERE p.order_id = o.order_id AND p.client_id = @client)`
)

var (
	getOrderStmt          = compileNamed(getOrderSQL)
	getOrderVisibleToStmt = compileNamed(getOrderVisibleToSQL)
)

// getOrderRow runs q, which reads one projection row;
// domain.ErrOrderNotFound if none.
func getOrderRow(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (orderProjectionRow, error) {
	var row orderProjectionRow
	r, err := queryRow(ctx, db, q, values)
	if err == nil {
		err = r.Scan(row.targets()...)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return orderProjectionRow{}, domain.ErrOrderNotFound
	}
	if err != nil {
		return orderProjectionRow{}, fmt.Errorf("get order %d: %w", values["order"], err)
	}
	return row, nil
}

func (row orderProjectionRow) toDomain() (domain.Order, error) {
	total, err := domain.NewMoney(row.Amount, domain.Currency(row.Currency))
	if err != nil {
		return domain.Order{}, fmt.Errorf("order %d: %w", row.OrderID, err)
	}
	return domain.NewOrder(domain.OrderID(row.OrderID), domain.CustomerID(row.CustomerID), total)
}

func (s *OrderStore) Get(ctx context.Context, id domain.OrderID) (domain.Order, error) {
	var row orderProjectionRow
	err := s.run(ctx, func(db *gorm.DB) (err error) {
		row, err = getOrderRow(ctx, db, getOrderStmt, map[string]any{"order": int64(id)})
		return err
	})
	if err != nil {
		return domain.Order{}, err
	}
	return row.toDomain()
}
