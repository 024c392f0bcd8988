package app

import (
	"context"

	"github.com/example/payment-service/internal/domain"
)

// GetOrder returns an order as the projection holds it, so a client can see
// what the order-projection consumer wrote for an order it pays.
//
// Visibility: orders come from Kafka and carry no client, but they hold a
// customer id, an amount and a saga id. A client sees an order only once it
// has a payment for it (any status, recorded by any of its keys); to every
// other client the order does not exist. Before its first charge a client
// has no need to read the order: the charge itself checks it, and a 422
// order-not-found leaves the key free for a retry once the order arrives.
type GetOrder struct {
	tx Transactor
}

// NewGetOrder builds the use case.
func NewGetOrder(tx Transactor) *GetOrder { return &GetOrder{tx: tx} }

// Handle returns domain.ErrOrderNotFound for an unknown order and for an
// order client may not see.
func (uc *GetOrder) Handle(ctx context.Context, client domain.ClientID, id domain.OrderID) (OrderProjection, error) {
	var p OrderProjection
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		p, err = r.OrderProjections.GetVisibleTo(ctx, id, client)
		return err
	})
	return p, err
}
