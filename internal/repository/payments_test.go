package repository_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
)

// R-DIST-IDEM-4 at the table: concurrent reservations of one external
// payment create one row; every other caller gets that row back, and no
// transaction is aborted by a unique violation.
func TestReserveCreatesOneRowPerExternalPayment(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	ctx := context.Background()
	money, err := domain.NewMoney(decimal.RequireFromString("100.50"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(1001, 42, money, "sandbox", "pi_1")
	if err != nil {
		t.Fatal(err)
	}

	const n = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[domain.PaymentID]int{}
	created := 0
	for i := range n {
		wg.Go(func() {
			client := domain.ClientID(fmt.Sprintf("client-%d", i%3))
			err := db.Transaction(func(tx *gorm.DB) error {
				res, err := repository.ReservePayment(ctx, tx, client, charge)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				ids[res.Payment.ID]++
				if res.Kind == app.ChargeReserved {
					created++
				}
				return nil
			})
			if err != nil {
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("created = %d, distinct ids = %d; want 1 and 1", created, len(ids))
	}
	var rows int64
	if err := db.Raw(`SELECT count(*) FROM payment WHERE status = 'PENDING'`).Scan(&rows).Error; err != nil || rows != 1 {
		t.Fatalf("rows = %d (%v), want 1", rows, err)
	}
}
