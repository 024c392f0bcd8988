package repository_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/example/payment-service/internal/app"
)

// Errors that reject the data itself (SQLSTATE classes 22 and 23) are
// app.ErrDataRejected, with the database's error still in the chain; errors
// about the system (here a missing table) are not, so the order consumer
// retries them without limit instead of dead-lettering events.
func TestDataRejectionsAreMappedAndSystemFailuresAreNot(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	if err := db.Exec(`ALTER TABLE order_projection ADD CONSTRAINT test_rejects_order_666 CHECK (order_id <> 666)`).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(`CREATE TABLE test_narrow (v numeric(3,0))`).Error; err != nil {
		t.Fatal(err)
	}
	apply := func(order int64) error {
		_, err := app.NewApplyOrderEvents(tx, "c").Handle(ctx, []app.OrderCreated{orderEvent(t, order, "1.00", time.Now())})
		return err
	}
	raw := func(sql string) error {
		return tx.Transact(ctx, func(context.Context, app.Repos) error { return db.Exec(sql).Error })
	}
	tests := []struct {
		name     string
		run      func() error
		rejected bool
		sqlstate string
	}{
		{"check constraint", func() error { return apply(666) }, true, "23514"},
		{"numeric out of range", func() error {
			return tx.Transact(ctx, func(ctx context.Context, _ app.Repos) error {
				return db.WithContext(ctx).Exec(`INSERT INTO test_narrow VALUES (12345)`).Error
			})
		}, true, "22003"},
		{"missing table", func() error { return raw(`SELECT * FROM no_such_table`) }, false, "42P01"},
	}
	for _, tc := range tests {
		err := tc.run()
		if err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		if got := errors.Is(err, app.ErrDataRejected); got != tc.rejected {
			t.Errorf("%s: ErrDataRejected = %v, want %v (%v)", tc.name, got, tc.rejected, err)
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tc.sqlstate {
			t.Errorf("%s: the database's error %s is not in the chain: %v", tc.name, tc.sqlstate, err)
		}
	}
	if err := apply(1001); err != nil {
		t.Fatalf("a valid event after the rejections: %v", err)
	}
}

// A transaction whose context ends while it runs is rolled back by
// database/sql itself, which then reports the commit as sql.ErrTxDone. That
// is the deadline, not a bug: the caller must see ErrStoreUnavailable (503
// with Retry-After, nothing done), as for any other deadline, never an
// unmapped error (500). The fault suite met it under load: phase 1 of a
// charge outlived its lock-bounded context.
func TestTransactionWhoseContextEndsIsStoreUnavailable(t *testing.T) {
	t.Parallel()
	_, tx := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		if _, _, err := r.Keys.Lookup(ctx, app.IdempotencyScope{ClientID: "c", Key: "k"}); err != nil {
			return err
		}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // database/sql's rollback on ctx end runs meanwhile
		return nil                        // the work "succeeded": commit
	})
	if !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("Transact after its context ended: %v, want ErrStoreUnavailable", err)
	}
}
