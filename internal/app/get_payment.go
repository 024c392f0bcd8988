package app

import (
	"context"

	"github.com/example/payment-service/internal/domain"
)

// GetPayment returns one of the client's payments.
type GetPayment struct {
	db Transactor
}

// NewGetPayment builds the use case.
func NewGetPayment(db Transactor) *GetPayment { return &GetPayment{db: db} }

// Handle returns domain.ErrPaymentNotFound for a payment that does not
// exist or belongs to another client: the two are indistinguishable, so a
// client cannot probe for other clients' payments.
func (uc *GetPayment) Handle(ctx context.Context, client domain.ClientID, id domain.PaymentID) (domain.Payment, error) {
	p, err := uc.db.AutoCommit().Charges.Get(ctx, id)
	if err != nil {
		return domain.Payment{}, err
	}
	if p.ClientID != client {
		return domain.Payment{}, domain.ErrPaymentNotFound
	}
	return p, nil
}
