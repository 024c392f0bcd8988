package repository_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/pgtemp"
)

// A commit that waits for a synchronous standby, as every commit does on a
// primary under Patroni's synchronous_mode, and whose wait is cut short has
// committed on the primary only: a failover to the standby loses it. Its
// outcome is unknown, and the repository must never report it as done (the
// service would answer the key's outcome and the failover would take it
// away). Here no standby ever answers (synchronous_standby_names names
// none that exists), so every commit waits until it is cut:
//
//   - by its context's end: pgx closes the connection, and the commit
//     fails with the database unavailable (the service answers 503);
//   - by a cancel request (an operator's pg_cancel_backend, a pooler
//     forwarding a client's cancel): PostgreSQL ends the wait with a
//     warning ("already committed locally") and answers the commit as
//     done. The repository sees the warning and fails the statement as
//     unavailable all the same.
func TestCommitWhoseReplicationWaitIsCutIsNotDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, err := pgtemp.Start(ctx, pgtemp.Options{Settings: map[string]string{"synchronous_standby_names": "no_such_standby"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dsn := pg.DSN("postgres")
	// The schema is written without waiting for the standby that never
	// comes.
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-csynchronous_commit=local")
	u.RawQuery = q.Encode()
	if err := migrations.Up(ctx, u.String()); err != nil {
		t.Fatal(err)
	}
	_, tx := openDBOn(t, dsn)

	// cancelWaits sends a cancel request to every backend waiting for the
	// standby, until ctx ends.
	cancelWaits := func(ctx context.Context) {
		admin, err := pgx.Connect(ctx, u.String())
		if err != nil {
			return
		}
		defer admin.Close(context.Background()) //nolint:errcheck // a test's admin connection
		for ctx.Err() == nil {
			_, _ = admin.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`)
			time.Sleep(50 * time.Millisecond)
		}
	}
	event := func(order int64) []app.OrderCreated {
		return []app.OrderCreated{orderEvent(t, order, "10.00", time.Now())}
	}
	for _, tc := range []struct {
		name string
		// timeout bounds the statement; cancel cuts the wait with a
		// cancel request instead.
		timeout time.Duration
		cancel  bool
		write   func(ctx context.Context, order int64) error
	}{
		{"a transaction's commit, its context ended", 500 * time.Millisecond, false, func(ctx context.Context, order int64) error {
			return tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
				_, err := r.Orders.UpsertNewer(ctx, event(order))
				return err
			})
		}},
		{"a transaction's commit, cancelled", 20 * time.Second, true, func(ctx context.Context, order int64) error {
			return tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
				_, err := r.Orders.UpsertNewer(ctx, event(order))
				return err
			})
		}},
		{"a statement on the pool, its context ended", 500 * time.Millisecond, false, func(ctx context.Context, order int64) error {
			_, err := tx.AutoCommit().Orders.UpsertNewer(ctx, event(order))
			return err
		}},
		{"a statement on the pool, cancelled", 20 * time.Second, true, func(ctx context.Context, order int64) error {
			_, err := tx.AutoCommit().Orders.UpsertNewer(ctx, event(order))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			if tc.cancel {
				go cancelWaits(ctx)
			}
			err := tc.write(ctx, time.Now().UnixNano()%1_000_000_000)
			if err == nil {
				t.Fatal("the commit was reported done, though no standby has it")
			}
			if !errors.Is(err, app.ErrStoreUnavailable) {
				t.Fatalf("got %v, want the database unavailable (the outcome unknown)", err)
			}
		})
	}
}
