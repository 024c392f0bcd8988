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

// Orders implements app.Orders on the order_projection table.
type Orders struct {
	db *gorm.DB
}

// orderProjectionRow is a row of order_projection, read by both the charge
// path (Orders) and the consumer's projection (OrderProjections).
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

// Get implements app.Orders.
func (s *Orders) Get(ctx context.Context, id domain.OrderID) (domain.Order, error) {
	row, err := getOrderRow(ctx, s.db, id)
	if err != nil {
		return domain.Order{}, err
	}
	return row.toDomain()
}
