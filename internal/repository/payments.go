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

// reserveSQL inserts the PENDING payment unless a unique index says no:
// UNIQUE (payment_provider, external_payment_id), the second layer of
// R-DIST-IDEM-4, or the partial unique index on order_id over PENDING and
// SUCCEEDED payments, the third layer (migration 00006). ON CONFLICT DO
// NOTHING with no target covers both. It is used instead of catching the
// unique violation: a violation would abort the whole transaction (and the
// key claim with it), while DO NOTHING waits for a concurrent insert of the
// same pair or order to commit and then yields no row.
const reserveSQL = `
INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
VALUES (?, ?, ?, ?, ?, ?, ?, 'PENDING')
ON CONFLICT DO NOTHING
RETURNING *`

// externalPaymentSQL reads the row the second layer stopped on.
const externalPaymentSQL = `
SELECT * FROM payment WHERE payment_provider = ? AND external_payment_id = ?`

// livePaymentOfOrderSQL reads the row the third layer stopped on: the
// order's one PENDING or SUCCEEDED payment.
const livePaymentOfOrderSQL = `
SELECT * FROM payment WHERE order_id = ? AND status IN ('PENDING', 'SUCCEEDED')`

// reserveAttempts bounds Reserve's retries when the row in the way is gone
// by the time it is read (a concurrent release, or a decline that took the
// order's PENDING payment out of the third layer's index).
const reserveAttempts = 3

// afterReserveConflict runs between a conflicting insert and the reads, in
// tests only, to make the race that the retry loop handles happen.
var afterReserveConflict func()

// Reserve implements app.Payments.
func (s *Payments) Reserve(ctx context.Context, client domain.ClientID, c domain.Charge) (app.Reservation, error) {
	db := s.db.WithContext(ctx)
	for range reserveAttempts {
		var inserted, byExternal, liveOfOrder []paymentRow
		err := db.Raw(reserveSQL,
			string(client), int64(c.OrderID), int64(c.CustomerID), string(c.Provider), string(c.ExternalPaymentID),
			c.Amount.Amount(), string(c.Amount.Currency()),
		).Scan(&inserted).Error
		if err != nil {
			return app.Reservation{}, fmt.Errorf("reserve payment: %w", err)
		}
		if len(inserted) == 1 {
			return reservation(app.Reserved, inserted[0])
		}
		if afterReserveConflict != nil {
			afterReserveConflict()
		}
		// The second layer first: the same external payment under a new key
		// is answered by that payment, whatever else the order has.
		if err := db.Raw(externalPaymentSQL, string(c.Provider), string(c.ExternalPaymentID)).Scan(&byExternal).Error; err != nil {
			return app.Reservation{}, fmt.Errorf("read payment by external id: %w", err)
		}
		if len(byExternal) == 1 {
			return reservation(app.ExternalPaymentExists, byExternal[0])
		}
		if err := db.Raw(livePaymentOfOrderSQL, int64(c.OrderID)).Scan(&liveOfOrder).Error; err != nil {
			return app.Reservation{}, fmt.Errorf("read live payment of order: %w", err)
		}
		if len(liveOfOrder) == 1 {
			return reservation(app.OrderHasLivePayment, liveOfOrder[0])
		}
		// The row in the way went away between the statements: try again.
	}
	return app.Reservation{}, app.ErrReserveContended
}

func reservation(kind app.ReservationKind, row paymentRow) (app.Reservation, error) {
	p, err := row.toDomain()
	return app.Reservation{Kind: kind, Payment: p}, err
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

// DeletePending implements app.Payments.
func (s *Payments) DeletePending(ctx context.Context, id domain.PaymentID) error {
	return s.db.WithContext(ctx).
		Where("id = ? AND status = ?", int64(id), string(domain.PaymentPending)).
		Delete(&paymentRow{}).Error
}

var _ app.Payments = (*Payments)(nil)
