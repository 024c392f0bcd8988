package app_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/replaycache"
)

// Phase 0 from the replay cache, on the fake key store: what the cache
// answers, what it never keeps, and when an entry ends. The adapter runs
// for real (internal/replaycache); the purge beside it on real PostgreSQL
// is internal/jobs' TestAPurgedKeyIsNeverAnsweredFromTheReplayCache.

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// cachedCommand is the fake command on a core with a replay cache whose
// entries end by policy on clock.
func cachedCommand(keys *fakeKeys, clock *testClock, policy app.ReplayCachePolicy) *app.IdempotentCommand[testCommand, string] {
	policy.Now = clock.Now
	core := app.NewCore(&fakeDB{keys: keys}, nil, testLock, slog.New(slog.DiscardHandler),
		app.WithReplayCache(replaycache.New(100, prometheus.NewRegistry()), policy))
	return app.NewIdempotentCommand[testCommand, string](core, "test", &testSteps{keys: keys})
}

var dayPolicy = app.ReplayCachePolicy{Retention: 24 * time.Hour, ClockMargin: 5 * time.Minute, MaxAge: 10 * time.Minute}

func completedAt(created time.Time, hash, body string) *fakeKeys {
	return &fakeKeys{recs: map[app.IdempotencyScope]app.IdempotencyRecord{testScope: {
		Scope: testScope, CommandHash: hash, Status: app.RecordCompleted, CreatedAt: created,
		Response: app.StoredResponse{StatusCode: 201, Body: []byte(body)},
	}}}
}

// A replay the cache holds is the stored answer, byte for byte, replayed,
// with the key store not asked (down, even); a reused key is 409 from it.
func TestReplayCacheAnswersACompletedKeyWithoutTheStore(t *testing.T) {
	t.Parallel()
	keys := completedAt(t0, "h", `{"id":1,"status":"SUCCEEDED"}`)
	clock := &testClock{now: t0.Add(time.Minute)}
	uc := cachedCommand(keys, clock, dayPolicy)
	ctx := context.Background()

	first, err := uc.Handle(ctx, testCommand{hash: "h"})
	if err != nil || !first.Replayed || keys.lookups != 1 {
		t.Fatalf("first replay = %+v, %v after %d lookups; want a replay read from the store once", first, err, keys.lookups)
	}
	keys.mu.Lock()
	keys.lookupErr = errDatabase // the database is gone: only the cache can answer
	keys.mu.Unlock()
	second, err := uc.Handle(ctx, testCommand{hash: "h"})
	if err != nil || !second.Replayed || second.Response.StatusCode != 201 || string(second.Response.Body) != `{"id":1,"status":"SUCCEEDED"}` {
		t.Fatalf("cached replay = %+v (%s), %v; want the stored answer replayed", second, second.Response.Body, err)
	}
	if _, err := uc.Handle(ctx, testCommand{hash: "another body"}); !errors.Is(err, app.ErrKeyReused) {
		t.Fatalf("reused key from the cache = %v, want ErrKeyReused", err)
	}
	keys.mu.Lock()
	defer keys.mu.Unlock()
	if keys.lookups != 1 {
		t.Fatalf("the store was asked %d times, want once: the replay and the reused key come from the cache", keys.lookups)
	}
}

// The cache's copy is its own: a caller that changes the answer it got,
// from the store or from the cache, changes nothing a later replay gets.
func TestReplayCacheKeepsItsOwnCopyOfTheAnswer(t *testing.T) {
	t.Parallel()
	keys := completedAt(t0, "h", `"stored"`)
	clock := &testClock{now: t0.Add(time.Minute)}
	uc := cachedCommand(keys, clock, dayPolicy)
	for range 3 {
		res, err := uc.Handle(context.Background(), testCommand{hash: "h"})
		if err != nil || string(res.Response.Body) != `"stored"` {
			t.Fatalf("replay = %s, %v; want \"stored\"", res.Response.Body, err)
		}
		copy(res.Response.Body, "XXXXXXXX")
	}
}

// An IN_PROGRESS record is never kept: each duplicate reads the store,
// and the one after the claim completes gets the completed answer.
func TestReplayCacheNeverKeepsAClaimInProgress(t *testing.T) {
	t.Parallel()
	token := uuid.New()
	keys := &fakeKeys{recs: map[app.IdempotencyScope]app.IdempotencyRecord{testScope: {
		Scope: testScope, CommandHash: "h", Status: app.RecordInProgress, CreatedAt: t0,
		LockToken: token, LockedUntil: time.Now().Add(testLock),
	}}}
	clock := &testClock{now: t0.Add(time.Minute)}
	uc := cachedCommand(keys, clock, dayPolicy)
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		var inProg *app.InProgressError
		if _, err := uc.Handle(ctx, testCommand{hash: "h"}); !errors.As(err, &inProg) {
			t.Fatalf("duplicate %d = %v, want in progress", i, err)
		}
		if keys.lookups != i {
			t.Fatalf("after duplicate %d the store was asked %d times: a claim in progress was answered from the cache", i, keys.lookups)
		}
	}
	if err := keys.Complete(ctx, testScope, token, app.StoredResponse{StatusCode: 201, Body: []byte(`"done"`)}); err != nil {
		t.Fatal(err)
	}
	res, err := uc.Handle(ctx, testCommand{hash: "h"})
	if err != nil || !res.Replayed || string(res.Response.Body) != `"done"` || keys.lookups != 3 {
		t.Fatalf("after the completion = %+v, %v, %d lookups; want the completed answer read from the store", res, err, keys.lookups)
	}
}

// An entry ends at its record's created_at plus the retention, less the
// clock margin, and at most the maximum age after it was kept; a record
// already that old, or without its created_at, is not kept at all.
func TestReplayCacheEntryEndsBeforeItsRecordCanBePurged(t *testing.T) {
	t.Parallel()
	hour := app.ReplayCachePolicy{Retention: time.Hour, ClockMargin: time.Minute, MaxAge: 24 * time.Hour}
	tests := []struct {
		name    string
		created time.Time
		policy  app.ReplayCachePolicy
		kept    time.Time // when phase 0 reads the store and keeps the entry
		// reads are the times of the replays after it, each with whether
		// the store is read again.
		reads []read
	}{
		{name: "ends at created_at + retention - margin", created: t0, policy: hour, kept: t0.Add(10 * time.Minute),
			reads: []read{{t0.Add(59*time.Minute - time.Nanosecond), false}, {t0.Add(59 * time.Minute), true}, {t0.Add(2 * time.Hour), true}}},
		{name: "ends at the maximum age", created: t0, policy: app.ReplayCachePolicy{Retention: 24 * time.Hour, ClockMargin: time.Minute, MaxAge: 10 * time.Minute},
			kept: t0.Add(time.Minute), reads: []read{{t0.Add(11*time.Minute - time.Nanosecond), false}, {t0.Add(11 * time.Minute), true}}},
		{name: "a record already inside the margin is not kept", created: t0, policy: hour, kept: t0.Add(59*time.Minute + 30*time.Second),
			reads: []read{{t0.Add(59*time.Minute + 31*time.Second), true}}},
		{name: "a record without its created_at is not kept", policy: hour, kept: t0,
			reads: []read{{t0.Add(time.Second), true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := completedAt(tc.created, "h", `"stored"`)
			clock := &testClock{now: tc.kept}
			uc := cachedCommand(keys, clock, tc.policy)
			if _, err := uc.Handle(context.Background(), testCommand{hash: "h"}); err != nil {
				t.Fatal(err)
			}
			lookups := keys.lookups
			for _, r := range tc.reads {
				clock.set(r.at)
				res, err := uc.Handle(context.Background(), testCommand{hash: "h"})
				if err != nil || !res.Replayed {
					t.Fatalf("replay at %s = %+v, %v", r.at.Sub(tc.created), res, err)
				}
				if fromStore := keys.lookups > lookups; fromStore != r.fromStore {
					t.Fatalf("replay at created_at + %s: read from the store %v, want %v", r.at.Sub(tc.created), fromStore, r.fromStore)
				}
				lookups = keys.lookups
			}
		})
	}
}

type read struct {
	at        time.Time
	fromStore bool
}
