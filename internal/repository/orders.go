package repository

import (
	"context"
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

// orderProjectionRow is a row of order_projection.
type orderProjectionRow struct {
	OrderID     int64 `gorm:"primaryKey"`
	CustomerID  int64
	Amount      decimal.Decimal
	Currency    string
	SagaID      uuid.NullUUID
	LastEventAt *time.Time
	LastEventID uuid.NullUUID
	UpdatedAt   time.Time
}

func (orderProjectionRow) TableName() string { return "order_projection" }

// getOrderRow loads one projection row; domain.ErrOrderNotFound if none.
func getOrderRow(ctx context.Context, db *gorm.DB, id domain.OrderID) (orderProjectionRow, error) {
	var row orderProjectionRow
	err := db.WithContext(ctx).Take(&row, int64(id)).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return orderProjectionRow{}, domain.ErrOrderNotFound
	}
	if err != nil {
		return orderProjectionRow{}, fmt.Errorf("get order %d: %w", id, err)
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
		row, err = getOrderRow(ctx, db, id)
		return err
	})
	if err != nil {
		return domain.Order{}, err
	}
	return row.toDomain()
}
