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

type orderProjectionRow struct {
	OrderID    int64 `gorm:"primaryKey"`
	CustomerID int64
	Amount     decimal.Decimal
	Currency   string
	UpdatedAt  time.Time
}

func (orderProjectionRow) TableName() string { return "order_projection" }

// Get implements app.Orders.
func (s *Orders) Get(ctx context.Context, id domain.OrderID) (domain.Order, error) {
	var row orderProjectionRow
	err := s.db.WithContext(ctx).Take(&row, int64(id)).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return domain.Order{}, domain.ErrOrderNotFound
	}
	if err != nil {
		return domain.Order{}, fmt.Errorf("get order: %w", err)
	}
	total, err := domain.NewMoney(row.Amount, domain.Currency(row.Currency))
	if err != nil {
		return domain.Order{}, fmt.Errorf("order %d: %w", row.OrderID, err)
	}
	return domain.NewOrder(domain.OrderID(row.OrderID), domain.CustomerID(row.CustomerID), total)
}

// SagaID implements app.Orders.
func (s *Orders) SagaID(ctx context.Context, id domain.OrderID) (uuid.NullUUID, error) {
	var saga []uuid.NullUUID
	err := s.db.WithContext(ctx).Raw(`SELECT saga_id FROM order_projection WHERE order_id = ?`, int64(id)).Scan(&saga).Error
	if err != nil {
		return uuid.NullUUID{}, fmt.Errorf("get saga id of order %d: %w", id, err)
	}
	if len(saga) == 0 {
		return uuid.NullUUID{}, nil
	}
	return saga[0], nil
}
