package repository_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Phase 1's rare path reserves on its own (Reserve), in the transaction
// that holds the claim, and makes the reservation the claim's recovery
// point: a charge's payment, a refund with its payment. Only the token
// that owns the claim writes it; a stranger's gets ErrLockLost, and its
// transaction leaves no reservation behind.
func TestRarePathReservationBecomesTheRecoveryPoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tx := openDB(t)
	succeeded := addPayment(t, db, "demo-client", 9301, "100.00", "RUB", domain.PaymentSucceeded)

	for _, tc := range []struct {
		command app.CommandName
		// reserve runs the command's Reserve, and answers the ids it
		// reserved: the payment, and the refund for a refund.
		reserve func(r app.Repos, k app.KeyClaim) (payment, refund *int64, err error)
		// recorded is the recovery point the record holds, and the
		// columns that name it for the builds before migration 00024.
		recorded string
	}{
		{app.CommandCharge, func(r app.Repos, k app.KeyClaim) (*int64, *int64, error) {
			res, err := r.Charges.Reserve(ctx, k, newCharge(t, 9302, "10.00", "pi_rare_"+k.Token.String()))
			if err != nil || res.Kind != app.ChargeReserved {
				return nil, nil, errors.Join(err, errors.New("not reserved"))
			}
			id := int64(res.Payment.ID)
			return &id, nil, nil
		}, `SELECT coalesce(recovery_point::text || ' ' || payment_id::text, '') FROM idempotency_record WHERE idempotency_key = ?`},
		{app.CommandRefund, func(r app.Repos, k app.KeyClaim) (*int64, *int64, error) {
			res, err := r.Refunds.Reserve(ctx, k, newRefund(t, succeeded, "10.00", "re_rare_"+k.Token.String()))
			if err != nil || res.Kind != app.RefundReserved {
				return nil, nil, errors.Join(err, errors.New("not reserved"))
			}
			payment, refund := int64(res.Refund.PaymentID), int64(res.Refund.ID)
			return &payment, &refund, nil
		}, `SELECT coalesce(recovery_point::text || ' ' || refund_id::text || ' ' || payment_id::text, '') FROM idempotency_record WHERE idempotency_key = ?`},
	} {
		t.Run(string(tc.command), func(t *testing.T) {
			key, owner := "rare-"+string(tc.command), uuid.New()
			if err := db.Exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
				VALUES ('demo-client', ?, ?, 'h', 'IN_PROGRESS', ?, now() + interval '1 minute')`, key, string(tc.command), owner).Error; err != nil {
				t.Fatal(err)
			}
			scope := app.IdempotencyScope{ClientID: "demo-client", Key: key}
			recorded := func() string {
				t.Helper()
				var s string
				if err := db.Raw(tc.recorded, key).Scan(&s).Error; err != nil {
					t.Fatal(err)
				}
				return s
			}

			var strangers *int64
			err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) (err error) {
				strangers, _, err = tc.reserve(r, app.KeyClaim{Scope: scope, Token: uuid.New()})
				return err
			})
			if !errors.Is(err, app.ErrLockLost) {
				t.Fatalf("a stranger's token: %v, want ErrLockLost", err)
			}
			if got := recorded(); got != "" {
				t.Fatalf("after a stranger's reservation the record holds %q, want nothing", got)
			}
			if strangers != nil && tc.command == app.CommandCharge {
				if n := countRows(t, db, `SELECT count(*) FROM payment WHERE id = ?`, *strangers); n != 0 {
					t.Fatalf("the stranger's payment %d stayed", *strangers)
				}
			}

			var payment, refund *int64
			err = tx.Transact(ctx, func(ctx context.Context, r app.Repos) (err error) {
				payment, refund, err = tc.reserve(r, app.KeyClaim{Scope: scope, Token: owner})
				return err
			})
			if err != nil {
				t.Fatalf("the owner's reservation: %v", err)
			}
			want := fmtID(*payment) + " " + fmtID(*payment)
			if refund != nil {
				want = fmtID(*refund) + " " + fmtID(*refund) + " " + fmtID(*payment)
			}
			if got := recorded(); got != want {
				t.Fatalf("the record's recovery point is %q, want %q", got, want)
			}
		})
	}
}

func fmtID(id int64) string { return strconv.FormatInt(id, 10) }
