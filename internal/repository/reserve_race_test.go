package repository

import (
	"context"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The row that makes Reserve's insert do nothing can be gone by the time
// Reserve reads it: a release deletes a PENDING payment, a decline takes it
// out of the order's index. Reserve then tries again instead of failing the
// charge with an internal error. The hook deletes the row at exactly that
// moment. Not parallel: the hook is package state.
func TestReserveRetriesWhenTheRowInTheWayVanishes(t *testing.T) {
	db, _ := openInternal(t, 4)
	ctx := context.Background()
	money, err := domain.NewMoney(decimal.RequireFromString("10"), "RUB")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		inTheWay string // the row that makes the insert do nothing
	}{
		{"same external payment, released", `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			VALUES ('c', 7001, 42, 'sandbox', 'pi_same', 10, 'RUB', 'PENDING')`},
		{"same order, another external payment, released", `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			VALUES ('c', 7002, 42, 'sandbox', 'pi_other', 10, 'RUB', 'PENDING')`},
	}
	charges := []string{"pi_same", "pi_new"}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := db.Exec(tc.inTheWay).Error; err != nil {
				t.Fatal(err)
			}
			order := domain.OrderID(7001 + i)
			vanished := 0
			afterReserveConflict = func() {
				vanished++
				if err := db.Exec(`DELETE FROM payment WHERE order_id = ?`, int64(order)).Error; err != nil {
					t.Error(err)
				}
			}
			t.Cleanup(func() { afterReserveConflict = nil })

			charge, err := domain.NewCharge(order, 42, money, "sandbox", domain.ExternalPaymentID(charges[i]))
			if err != nil {
				t.Fatal(err)
			}
			res, err := reserve(ctx, db, "c", charge)
			if err != nil || res.Kind != app.ChargeReserved || vanished != 1 {
				t.Fatalf("reserve: %+v, %v (the row vanished %d times); want a new reservation", res, err, vanished)
			}
		})
	}
}
