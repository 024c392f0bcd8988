package app

import (
	"context"

	"github.com/example/payment-service/internal/domain"
)

// GetPayment returns one of the client's payments.
type GetPayment struct {
	tx Transactor
}

// NewGetPayment builds the use case.
func NewGetPayment(tx Transactor) *GetPayment { return &GetPayment{tx: tx} }

// Handle returns domain.ErrPaymentNotFound for a payment that does not
// exist or belongs to another client: the two are indistinguishable, so a
// client cannot probe for other clients' payments.
func (uc *GetPayment) Handle(ctx context.Context, client domain.ClientID, id domain.PaymentID) (domain.Payment, error) {
	var p domain.Payment
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		p, err = r.Payments.Get(ctx, id)
		return err
	})
	if err != nil {
		return domain.Payment{}, err
	}
	if p.ClientID != client {
		return domain.Payment{}, domain.ErrPaymentNotFound
	}
	return p, nil
}
