package repository_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// lock (migration 00020). Its waker is woken once, after the commit, when
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
			ev := succeededEvent(t, int64(7000+i))
			waker := &visibilityWaker{t: t, admin: admin, eventID: ev.ID}
			tx := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{
				PaymentEventsTopic: repository.DefaultPaymentEventsTopic, Waker: waker}))
			err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
				if err := r.Outbox.AppendPaymentEvent(ctx, ev); err != nil {
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

// succeededEvent is a PaymentSucceeded.v1 of payment seq.
func succeededEvent(t *testing.T, seq int64) app.PaymentEvent {
	t.Helper()
	charge := newCharge(t, seq, "10.50", "pi_wake")
	p := domain.Payment{ID: domain.PaymentID(seq), ClientID: "c", Charge: charge, Status: domain.PaymentSucceeded, CreatedAt: time.Now()}
	ev, err := app.NewPaymentEvent(p, uuid.NullUUID{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
