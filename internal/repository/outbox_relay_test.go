package repository_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// A relay standby must not hold a snapshot while it waits to lead: an index
// built concurrently, by a migration or by hand, waits for every older
// snapshot, and beside a standby that sat in pg_advisory_lock it waited for
// as long as the leader lived. The standby, once it leads, must also hear
// the outbox's notifications.
func TestAnIndexBuildDoesNotWaitForARelayStandby(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	store := repository.NewOutboxRelayStore(dsn)
	leader, err := store.Lead(ctx)
	if err != nil {
		t.Fatalf("the first relay: %v", err)
	}
	type led struct {
		sess outbox.Session
		err  error
	}
	standby := make(chan led, 1)
	go func() {
		sess, err := store.Lead(ctx)
		standby <- led{sess, err}
	}()
	// Until the standby has asked for the lock at least once (in either
	// way of asking, so that this test also runs against a waiting one).
	for asked := false; !asked; {
		if err := admin.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND (query ILIKE '%pg_try_advisory_lock%'
                       OR (state = 'active' AND query ILIKE '%pg_advisory_lock%')))`).Scan(&asked); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the standby never asked for the relay lock")
		}
		time.Sleep(20 * time.Millisecond)
	}

	conn, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET statement_timeout = '20s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE INDEX CONCURRENTLY relay_standby_test ON outbox_event (created_at)`); err != nil {
		t.Fatalf("an index build beside a relay standby: %v", err)
	}

	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	var next led
	select {
	case next = <-standby:
	case <-ctx.Done():
		t.Fatal("the standby did not take over when the leader's session ended")
	}
	if next.err != nil {
		t.Fatalf("the standby taking over: %v", next.err)
	}
	defer func() {
		if err := next.sess.Close(); err != nil {
			t.Error(err)
		}
	}()
	if _, err := conn.Exec(ctx, `NOTIFY outbox_event`); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	if err := next.sess.Wait(waitCtx); err != nil {
		t.Fatalf("the new leader hears no notification: %v", err)
	}
}
