package domain

import "fmt"

// OrderID identifies an order; it is positive.
type OrderID int64

// CustomerID identifies a customer; it is positive.
type CustomerID int64

// Order is what the payment service knows of an order: who pays and how much.
type Order struct {
	ID         OrderID
	CustomerID CustomerID
	Total      Money
}

// NewOrder validates the ids; total is valid by construction.
func NewOrder(id OrderID, customer CustomerID, total Money) (Order, error) {
	if id <= 0 || customer <= 0 {
		return Order{}, fmt.Errorf("%w: order and customer ids must be positive", ErrInvalid)
	}
	return Order{ID: id, CustomerID: customer, Total: total}, nil
}

// Accepts reports whether a charge pays exactly this order: same customer,
// same amount, same currency.
func (o Order) Accepts(c Charge) error {
	if c.OrderID != o.ID {
		return fmt.Errorf("%w: order %d is not order %d", ErrOrderMismatch, c.OrderID, o.ID)
	}
	if c.CustomerID != o.CustomerID {
		return fmt.Errorf("%w: customer differs", ErrOrderMismatch)
	}
	if !c.Amount.Equal(o.Total) {
		return fmt.Errorf("%w: amount or currency differs", ErrOrderMismatch)
	}
	return nil
}
