package app

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// OrderStore is the order projection: the orders a charge is checked
// against, written from order events.
type OrderStore interface {
	// Get returns domain.ErrOrderNotFound if the order is unknown.
	Get(ctx context.Context, id domain.OrderID) (domain.Order, error)
	// UpsertNewer writes each order unless its stored row was written from a
	// newer event (or the same one), and returns how many rows it wrote.
	// events must name distinct orders.
	UpsertNewer(ctx context.Context, events []OrderCreated) (written int, err error)
	// GetVisibleTo returns the projection row if client may see it: the
	// client has a payment for the order (any status). Otherwise, and when
	// there is no such row, domain.ErrOrderNotFound, so the two cannot be
	// told apart.
	GetVisibleTo(ctx context.Context, id domain.OrderID, client domain.ClientID) (OrderProjection, error)
}

// OrderProjection is one row of the order projection, as GET /orders shows it.
type OrderProjection struct {
	// Order is the order: customer, amount and currency.
	Order domain.Order
	// SagaID is the order's saga, when its event named one.
	SagaID uuid.NullUUID
	// LastEvent is the version of the event the row was last written from;
	// nil for a row no event wrote (seeded data).
	LastEvent *EventVersion
	// UpdatedAt is when the row was last written.
	UpdatedAt time.Time
}

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
	db Transactor
}

// NewGetOrder builds the use case.
func NewGetOrder(db Transactor) *GetOrder { return &GetOrder{db: db} }

// Handle returns domain.ErrOrderNotFound for an unknown order and for an
// order client may not see.
func (uc *GetOrder) Handle(ctx context.Context, client domain.ClientID, id domain.OrderID) (OrderProjection, error) {
	return uc.db.AutoCommit().Orders.GetVisibleTo(ctx, id, client)
}
