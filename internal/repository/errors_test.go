package repository_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
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

// A statement that fails because the database cannot be had in time is
// ErrStoreUnavailable (503, retried without limit by the consumers: not
// ErrDataRejected), with what ended it still in the chain: a refused
// connection, the context's deadline, or its cancellation, which the
// service recognises on shutdown (errors.Is(err, context.Canceled)) as a
// clean stop, not a failure.
func TestAStoreErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	_, tx := openDBOn(t, dsn)
	down, err := repository.Open("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
		repository.PoolConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	closeOnCleanup(t, down)
	lookup := func(ctx context.Context, tx *repository.Transactor) error {
		_, _, err := tx.AutoCommit().Keys.Lookup(ctx, app.IdempotencyScope{ClientID: "c", Key: "k"})
		return err
	}
	tests := []struct {
		name  string
		run   func() error
		cause error
	}{
		{"the connection is refused",
			func() error { return lookup(t.Context(), repository.NewTransactor(down)) },
			syscall.ECONNREFUSED},
		{"the context's deadline passes while the statement waits for a lock",
			func() error {
				return testdb.WhileLocked(t, dsn, "idempotency_record", func() error {
					ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
					defer cancel()
					return lookup(ctx, tx)
				})
			},
			context.DeadlineExceeded},
		{"the context is cancelled while the connection is made",
			func() error {
				silent, accepted := silentServer(t)
				db, err := repository.Open("postgres://postgres@"+silent+"/none?sslmode=disable",
					repository.PoolConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					t.Fatal(err)
				}
				closeOnCleanup(t, db)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				go func() { <-accepted; cancel() }()
				return lookup(ctx, repository.NewTransactor(db))
			},
			context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if !errors.Is(err, app.ErrStoreUnavailable) || errors.Is(err, app.ErrDataRejected) {
				t.Fatalf("%v, want ErrStoreUnavailable and not ErrDataRejected", err)
			}
			if !errors.Is(err, tc.cause) {
				t.Errorf("%v: %v is not in the chain", err, tc.cause)
			}
		})
	}
}

// silentServer listens on loopback, accepts connections and never answers
// them; accepted is closed at the first.
func silentServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if conns = append(conns, c); len(conns) == 1 {
				close(first)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), first
}

func closeOnCleanup(t *testing.T, db *gorm.DB) {
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
}
