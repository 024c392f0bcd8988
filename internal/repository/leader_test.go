package repository_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// The leader lock is a session advisory lock held on one pinned connection:
// one holder at a time, handed over on Close, and lost with the session when
// the connection dies, so a replica whose connection was cut stops leading.
//
// pg_locks is the cluster's: the test reads and ends only its own database's
// locks, since other packages' tests lead in theirs at the same time.
func TestLeaderLockFollowsTheSession(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	newLock := func() *repository.LeaderLock {
		db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		})
		l, err := repository.NewLeaderLock(db, 7)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holders := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = `+thisDatabase).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := newLock(), newLock()

	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("first replica: %v", err)
	}
	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("the leader asking again: %v", err)
	}
	if err := b.IsLeader(ctx); !errors.Is(err, repository.ErrNotLeader) {
		t.Fatalf("second replica while the first leads: %v, want ErrNotLeader", err)
	}
	if n := holders(); n != 1 {
		t.Fatalf("advisory locks held = %d, want 1", n)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holders(); n != 0 {
		t.Fatalf("after Close, advisory locks held = %d, want 0 (the pooled connection must not keep it)", n)
	}
	if err := b.IsLeader(ctx); err != nil {
		t.Fatalf("second replica after the first closed: %v", err)
	}

	// The leader's session is killed: the lock goes with it, and the old
	// leader finds out at its next check. The timeout makes the call wait
	// until the backend has exited and so released the lock.
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = `+thisDatabase); err != nil {
		t.Fatal(err)
	}
	if err := a.IsLeader(ctx); err != nil {
		t.Fatalf("first replica after the leader's session died: %v", err)
	}
	if err := b.IsLeader(ctx); !errors.Is(err, repository.ErrNotLeader) {
		t.Fatalf("the replica whose session died: %v, want ErrNotLeader", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// thisDatabase is the oid pg_locks names the test's own database by.
const thisDatabase = `(SELECT oid FROM pg_database WHERE datname = current_database())`
