package app

import (
	"context"

	"github.com/example/payment-service/internal/domain"
)

// GetOrder returns an order as the projection holds it, so a person can see
// what the order-projection consumer wrote.
type GetOrder struct {
	tx Transactor
}

// NewGetOrder builds the use case.
func NewGetOrder(tx Transactor) *GetOrder { return &GetOrder{tx: tx} }

// Handle returns domain.ErrOrderNotFound for an unknown order.
func (uc *GetOrder) Handle(ctx context.Context, id domain.OrderID) (OrderProjection, error) {
	var p OrderProjection
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		p, err = r.OrderProjections.Get(ctx, id)
		return err
	})
	return p, err
}
