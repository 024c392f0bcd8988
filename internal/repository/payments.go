package repository

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Payments implements app.Payments on the payment table.
type Payments struct {
	db *gorm.DB
}

type paymentRow struct {
	ID                int64 `gorm:"primaryKey"`
	ClientID          string
	OrderID           int64
	CustomerID        int64
	PaymentProvider   string
	ExternalPaymentID string
	Amount            decimal.Decimal
	Currency          string
	Status            string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

func (paymentRow) TableName() string { return "payment" }

func (row paymentRow) toDomain() (domain.Payment, error) {
	money, err := domain.NewMoney(row.Amount, domain.Currency(row.Currency))
	if err != nil {
		return domain.Payment{}, fmt.Errorf("payment %d: %w", row.ID, err)
	}
	charge, err := domain.NewCharge(domain.OrderID(row.OrderID), domain.CustomerID(row.CustomerID), money,
		domain.ProviderName(row.PaymentProvider), domain.ExternalPaymentID(row.ExternalPaymentID))
	if err != nil {
		return domain.Payment{}, fmt.Errorf("payment %d: %w", row.ID, err)
	}
	return domain.Payment{
		ID:        domain.PaymentID(row.ID),
		ClientID:  domain.ClientID(row.ClientID),
		Charge:    charge,
		Status:    domain.PaymentStatus(row.Status),
		CreatedAt: row.CreatedAt.UTC(),
	}, nil
}

// reserveSQL inserts the PENDING payment unless the (provider, external id)
// pair exists. ON CONFLICT DO NOTHING instead of catching the unique
// violation: a violation would abort the whole transaction (and the key
// claim with it), while DO NOTHING waits for a concurrent insert of the same
// pair to commit and then yields no row.
const reserveSQL = `
INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
VALUES (?, ?, ?, ?, ?, ?, ?, 'PENDING')
ON CONFLICT ON CONSTRAINT payment_provider_external_payment_id_key DO NOTHING
RETURNING *`

// Reserve implements app.Payments.
func (s *Payments) Reserve(ctx context.Context, client domain.ClientID, c domain.Charge) (domain.Payment, bool, error) {
	var inserted []paymentRow
	err := s.db.WithContext(ctx).Raw(reserveSQL,
		string(client), int64(c.OrderID), int64(c.CustomerID), string(c.Provider), string(c.ExternalPaymentID),
		c.Amount.Amount(), string(c.Amount.Currency()),
	).Scan(&inserted).Error
	if err != nil {
		return domain.Payment{}, false, fmt.Errorf("reserve payment: %w", err)
	}
	if len(inserted) == 1 {
		p, err := inserted[0].toDomain()
		return p, true, err
	}
	var existing paymentRow
	err = s.db.WithContext(ctx).
		Where("payment_provider = ? AND external_payment_id = ?", string(c.Provider), string(c.ExternalPaymentID)).
		Take(&existing).Error
	if err != nil {
		return domain.Payment{}, false, fmt.Errorf("read existing payment: %w", err)
	}
	p, err := existing.toDomain()
	return p, false, err
}

// Get implements app.Payments.
func (s *Payments) Get(ctx context.Context, id domain.PaymentID) (domain.Payment, error) {
	var row paymentRow
	err := s.db.WithContext(ctx).Take(&row, int64(id)).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return domain.Payment{}, domain.ErrPaymentNotFound
	}
	if err != nil {
		return domain.Payment{}, fmt.Errorf("get payment: %w", err)
	}
	return row.toDomain()
}

// SetStatus implements app.Payments. Setting the status a payment already
// has is a no-op, so a resumed charge can record the provider's answer again.
func (s *Payments) SetStatus(ctx context.Context, id domain.PaymentID, status domain.PaymentStatus) (domain.Payment, error) {
	var rows []paymentRow
	err := s.db.WithContext(ctx).Raw(
		`UPDATE payment SET status = ?, updated_at = now()
		  WHERE id = ? AND status IN ('PENDING', ?)
		  RETURNING *`,
		string(status), int64(id), string(status)).Scan(&rows).Error
	if err != nil {
		return domain.Payment{}, fmt.Errorf("set payment status: %w", err)
	}
	if len(rows) == 0 {
		return domain.Payment{}, fmt.Errorf("set payment %d to %s: it is not PENDING", id, status)
	}
	return rows[0].toDomain()
}

// DeletePending implements app.Payments.
func (s *Payments) DeletePending(ctx context.Context, id domain.PaymentID) error {
	return s.db.WithContext(ctx).
		Where("id = ? AND status = ?", int64(id), string(domain.PaymentPending)).
		Delete(&paymentRow{}).Error
}

var _ app.Payments = (*Payments)(nil)
