package repository_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// visibilityWaker records each wake and whether the event was visible to
// another session when it came.
type visibilityWaker struct {
	t       *testing.T
	admin   *pgxpool.Pool
	eventID uuid.UUID

	mu      sync.Mutex
	wakes   int
	visible bool
}

func (w *visibilityWaker) Wake() {
	var n int
	if err := w.admin.QueryRow(context.Background(), `SELECT count(*) FROM outbox_event WHERE event_id = $1`, w.eventID).Scan(&n); err != nil {
		w.t.Error(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakes++
	w.visible = n == 1
}

// A transaction that writes an event notifies nothing inside it: a notify
// there would serialize every charge's commit on PostgreSQL's one notify
// lock. Its waker is woken once, after the commit, when
// the row is visible; a rolled-back transaction wakes nothing.
func TestAnEventIsAnnouncedAfterItsCommitNotInsideIt(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	db, _ := openDBOn(t, dsn)
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	for _, channel := range []string{"outbox_event", "sentinel"} {
		if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
			t.Fatal(err)
		}
	}

	errRollBack := errors.New("roll back")
	for i, tc := range []struct {
		name      string
		rollBack  bool
		wantWakes int
	}{
		{"committed", false, 1},
		{"rolled back", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waker := &visibilityWaker{t: t, admin: admin}
			tx := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{
				PaymentEventsTopic: repository.DefaultPaymentEventsTopic, Waker: waker}))
			ev, k := claimedCharge(t, db, tx.AutoCommit(), int64(7000+i))
			waker.eventID = ev.ID
			// Phase 3 inside a transaction, as a provider's event records it.
			err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
				if err := r.Charges.Record(ctx, app.ChargeRecord{Key: k, Response: app.StoredResponse{StatusCode: 201, Body: []byte(`{}`)}, Event: ev}); err != nil {
					return err
				}
				if waker.wakes != 0 {
					t.Error("the waker was woken before the commit")
				}
				if tc.rollBack {
					return errRollBack
				}
				return nil
			})
			if tc.rollBack != errors.Is(err, errRollBack) {
				t.Fatalf("Transact: %v", err)
			}
			if waker.wakes != tc.wantWakes || (tc.wantWakes > 0 && !waker.visible) {
				t.Fatalf("wakes %d (row visible at the wake: %v), want %d after the commit", waker.wakes, waker.visible, tc.wantWakes)
			}

			// Notifications come in commit order: if the transaction had
			// notified, its notification would come before this one.
			if _, err := admin.Exec(ctx, `NOTIFY sentinel`); err != nil {
				t.Fatal(err)
			}
			n, err := listener.WaitForNotification(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n.Channel != "sentinel" {
				t.Fatalf("the transaction notified %q inside itself", n.Channel)
			}
		})
	}
}

// claimedCharge claims a key for a charge of order seq, with its PENDING
// payment, and returns the claim and the PaymentSucceeded.v1 that records it.
func claimedCharge(t *testing.T, db *gorm.DB, r app.Repos, seq int64) (app.PaymentEvent, app.KeyClaim) {
	t.Helper()
	addOrder(t, db, seq, "10.50")
	k := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: fmt.Sprint("wake-", seq)}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
	res, err := r.Charges.Claim(context.Background(), k, newCharge(t, seq, "10.50", fmt.Sprint("pi_wake_", seq)))
	if err != nil || !res.Reserved {
		t.Fatalf("claim: %+v %v", res, err)
	}
	p := *res.Payment
	p.Status = domain.PaymentSucceeded
	ev, err := app.NewPaymentEvent(p, uuid.NullUUID{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ev, k
}
