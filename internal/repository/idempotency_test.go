package repository_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func openDB(t testing.TB) (*gorm.DB, *repository.Transactor) {
	t.Helper()
	db, err := repository.Open(testdb.New(t), repository.PoolConfig{MaxOpenConns: 60}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db, repository.NewTransactor(db)
}

func claim(ctx context.Context, tx *repository.Transactor, c app.Claim) (rec app.IdempotencyRecord, claimed bool, err error) {
	err = tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		rec, claimed, err = r.Idempotency.Claim(ctx, c)
		return err
	})
	return rec, claimed, err
}

var scope = app.IdempotencyScope{ClientID: "demo-client", Key: "k"}

// The claim is one atomic statement: of many concurrent claims on one key,
// exactly one wins, and every loser sees the winner's record.
func TestClaimIsAtomicUnderConcurrency(t *testing.T) {
	t.Parallel()
	_, tx := openDB(t)
	ctx := context.Background()

	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := map[uuid.UUID]bool{}
	var losers int
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			token := uuid.New()
			rec, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "h", Token: token, LockFor: time.Minute})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("claim: %v", err)
			case claimed:
				winners[token] = true
			default:
				losers++
				if rec.Status != app.RecordInProgress || rec.CommandHash != "h" {
					t.Errorf("loser saw %+v", rec)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(winners) != 1 || losers != n-1 {
		t.Fatalf("winners = %d, losers = %d; want exactly one winner", len(winners), losers)
	}
}

// Completion is fenced by the lock token: once a retry has taken an
// expired claim over, the old owner can neither complete nor release it.
func TestCompletionIsFencedByLockToken(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()

	old, fresh := uuid.New(), uuid.New()
	if _, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "h", Token: old, LockFor: time.Minute}); err != nil || !claimed {
		t.Fatalf("first claim: %v %v", claimed, err)
	}
	// A live lock is not taken over.
	if _, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "h", Token: fresh, LockFor: time.Minute}); err != nil || claimed {
		t.Fatalf("claim over a live lock: claimed=%v err=%v", claimed, err)
	}
	// Let the lock expire.
	if err := db.Exec(`UPDATE idempotency_record SET locked_until = now() - interval '1 second'`).Error; err != nil {
		t.Fatal(err)
	}
	// An expired lock is not taken over by a different command either.
	if _, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "other", Token: fresh, LockFor: time.Minute}); err != nil || claimed {
		t.Fatalf("takeover by another command: claimed=%v err=%v", claimed, err)
	}
	rec, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "h", Token: fresh, LockFor: time.Minute})
	if err != nil || !claimed || rec.LockToken != fresh {
		t.Fatalf("takeover: claimed=%v token=%v err=%v", claimed, rec.LockToken, err)
	}

	stale := app.StoredResponse{StatusCode: 201, Body: []byte(`{"from":"old"}`)}
	err = tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		return r.Idempotency.Complete(ctx, scope, old, stale)
	})
	if !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("old owner's Complete = %v, want ErrLockLost", err)
	}
	err = tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		return r.Idempotency.Release(ctx, scope, old)
	})
	if !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("old owner's Release = %v, want ErrLockLost", err)
	}

	want := app.StoredResponse{StatusCode: 201, Body: []byte(`{"b": 1,  "a":2}`)}
	err = tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		return r.Idempotency.Complete(ctx, scope, fresh, want)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, claimed, err := claim(ctx, tx, app.Claim{Scope: scope, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute})
	if err != nil || claimed {
		t.Fatalf("claim of a completed key: claimed=%v err=%v", claimed, err)
	}
	// json (not jsonb) keeps the bytes exactly, odd spacing and key order included.
	if got.Status != app.RecordCompleted || got.Response.StatusCode != 201 || string(got.Response.Body) != string(want.Body) {
		t.Fatalf("stored %+v, want %s", got, want.Body)
	}
}

func TestStoreUnavailableIsMapped(t *testing.T) {
	t.Parallel()
	db, err := repository.Open("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
		repository.PoolConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = claim(context.Background(), repository.NewTransactor(db), app.Claim{Scope: scope, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute})
	if !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("err = %v, want ErrStoreUnavailable", err)
	}
	if err := repository.Ping(context.Background(), db); !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("Ping = %v, want ErrStoreUnavailable", err)
	}
}
