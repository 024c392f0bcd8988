package app_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
)

// The core's decisions, phase by phase, on in-memory fakes: a key store
// with the real store's fence (every write after the claim needs the
// claim's token), and a command whose steps answer as each case says. The
// statements and the provider are tested for real elsewhere; this is what
// the core does with each of their answers.

const testLock = 30 * time.Second

// fakeKeys is an in-memory idempotency_record table.
type fakeKeys struct {
	mu        sync.Mutex
	recs      map[app.IdempotencyScope]app.IdempotencyRecord
	lookupErr error // every Lookup fails with it
	expireErr error // ExpireLock fails with it (a database error)
	lookups   int   // how many times Lookup was called
}

func (f *fakeKeys) Lookup(_ context.Context, s app.IdempotencyScope) (app.IdempotencyRecord, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.lookupErr != nil {
		return app.IdempotencyRecord{}, false, f.lookupErr
	}
	rec, ok := f.recs[s]
	return rec, ok, nil
}

// owned runs fn on the record token owns, or answers ErrLockLost.
func (f *fakeKeys) owned(s app.IdempotencyScope, token uuid.UUID, fn func(rec *app.IdempotencyRecord)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[s]
	if !ok || rec.Status != app.RecordInProgress || rec.LockToken != token {
		return app.ErrLockLost
	}
	if fn == nil {
		delete(f.recs, s)
		return nil
	}
	fn(&rec)
	f.recs[s] = rec
	return nil
}

func (f *fakeKeys) Complete(_ context.Context, s app.IdempotencyScope, token uuid.UUID, resp app.StoredResponse) error {
	return f.owned(s, token, func(rec *app.IdempotencyRecord) {
		rec.Status, rec.Response, rec.LockToken, rec.LockedUntil = app.RecordCompleted, resp, uuid.Nil, time.Time{}
	})
}

func (f *fakeKeys) Answer(_ context.Context, s app.IdempotencyScope, command app.CommandName, hash string, resp app.StoredResponse) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.recs[s]; ok {
		return false, nil
	}
	f.recs[s] = app.IdempotencyRecord{Scope: s, Command: command, CommandHash: hash, Status: app.RecordCompleted, Response: resp}
	return true, nil
}

func (f *fakeKeys) ExpireLock(_ context.Context, s app.IdempotencyScope, token uuid.UUID) error {
	if f.expireErr != nil {
		return f.expireErr
	}
	return f.owned(s, token, func(rec *app.IdempotencyRecord) { rec.LockedUntil = time.Now() })
}

// claim writes an IN_PROGRESS record for k, as a claim statement does.
func (f *fakeKeys) claim(k app.KeyClaim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs[k.Scope] = app.IdempotencyRecord{Scope: k.Scope, CommandHash: k.CommandHash, Status: app.RecordInProgress,
		LockToken: k.Token, LockedUntil: time.Now().Add(k.LockFor)}
}

func (f *fakeKeys) get(s app.IdempotencyScope) (app.IdempotencyRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[s]
	return rec, ok
}

// fakeDB is the Transactor: its repositories are the fake key store; a
// transaction that fails puts the records back as they were.
type fakeDB struct {
	keys *fakeKeys
	txs  int
}

func (d *fakeDB) AutoCommit() app.Repos { return app.Repos{Keys: d.keys} }

func (d *fakeDB) Transact(ctx context.Context, fn func(context.Context, app.Repos) error) error {
	d.txs++
	d.keys.mu.Lock()
	saved := make(map[app.IdempotencyScope]app.IdempotencyRecord, len(d.keys.recs))
	for s, r := range d.keys.recs {
		saved[s] = r
	}
	d.keys.mu.Unlock()
	err := fn(ctx, d.AutoCommit())
	if err != nil {
		d.keys.mu.Lock()
		d.keys.recs = saved
		d.keys.mu.Unlock()
	}
	return err
}

// testCommand is a command of the fake kind.
type testCommand struct{ hash string }

var testScope = app.IdempotencyScope{ClientID: "c", Key: "k"}

func (testCommand) IdempotencyKey() app.IdempotencyScope { return testScope }
func (c testCommand) Hash() string                       { return c.hash }
func (testCommand) Endpoint() string                     { return "test" }

// testSteps answer as a case says.
type testSteps struct {
	keys *fakeKeys
	// claims are Claim's answers in turn: on the pool, then in the
	// transaction. A fresh or resumed claim writes the key's record.
	claims []claimAnswer
	// call is the provider's answer; duringCall happens while it is made
	// (a webhook records the decision, another attempt takes the key over).
	call       answer
	duringCall func(k app.KeyClaim)
	// abilities are the provider's (a lookup by key, within bound when
	// the case sets one).
	abilities app.ProviderAbilities
	// lookups are the lookups' answers in turn; lookedUpAt when each came.
	lookups    []answer
	lookedUpAt []time.Time
	recordErr  error
	releaseErr error
	// onClaim happens as Claim is called (a record committed meanwhile).
	onClaim func()

	calls     int
	recorded  []app.Settlement
	released  bool
	claimedAt time.Time
}

type claimAnswer struct {
	kind app.ClaimKind
	err  error
}

type answer struct {
	decision app.ProviderDecision
	err      error
}

func (s *testSteps) Claim(_ context.Context, _ app.Repos, cmd testCommand, k app.KeyClaim) (app.Claimed[string], error) {
	if len(s.claims) == 0 {
		return app.Claimed[string]{}, errors.New("an unexpected claim")
	}
	c := s.claims[0]
	s.claims = s.claims[1:]
	if s.onClaim != nil {
		s.onClaim()
	}
	s.claimedAt = time.Now()
	switch {
	case c.err != nil:
		return app.Claimed[string]{}, c.err
	case c.kind == app.ClaimFresh || c.kind == app.ClaimResumed:
		s.keys.claim(k)
		return app.Claimed[string]{Kind: c.kind, Reservation: "reservation"}, nil
	case c.kind == app.ClaimAnswered:
		s.keys.claim(k)
		resp := app.StoredResponse{StatusCode: 200, Body: []byte(`"answered in phase 1"`)}
		return app.Claimed[string]{Kind: c.kind, Response: resp}, s.keys.Complete(context.Background(), k.Scope, k.Token, resp)
	default:
		return app.Claimed[string]{Kind: c.kind}, nil
	}
}

func (s *testSteps) Call(ctx context.Context, _ string) (app.ProviderDecision, error) {
	s.calls++
	if s.duringCall != nil {
		rec, _ := s.keys.get(testScope)
		s.duringCall(app.KeyClaim{Scope: testScope, CommandHash: rec.CommandHash, Token: rec.LockToken})
	}
	return s.call.decision, s.call.err
}

func (s *testSteps) Abilities(string) app.ProviderAbilities { return s.abilities }

func (s *testSteps) Lookup(context.Context, string) (app.ProviderDecision, error) {
	s.lookedUpAt = append(s.lookedUpAt, time.Now())
	if len(s.lookups) == 0 {
		return "", errors.New("an unexpected lookup")
	}
	a := s.lookups[0]
	s.lookups = s.lookups[1:]
	return a.decision, a.err
}

// settledResponse is what Record stores for a settlement.
func settledResponse(st app.Settlement) app.StoredResponse {
	return app.StoredResponse{StatusCode: 201, Body: []byte(`"` + string(st) + `"`)}
}

func (s *testSteps) Record(ctx context.Context, r app.Repos, k app.KeyClaim, _ string, st app.Settlement) (app.StoredResponse, error) {
	if s.recordErr != nil {
		return app.StoredResponse{}, s.recordErr
	}
	resp := settledResponse(st)
	if err := r.Keys.Complete(ctx, k.Scope, k.Token, resp); err != nil {
		return app.StoredResponse{}, err
	}
	s.recorded = append(s.recorded, st)
	return resp, nil
}

func (*testSteps) Rebuild(app.IdempotencyScope, string, string) testCommand { return testCommand{} }

func (s *testSteps) Release(_ context.Context, _ app.Repos, k app.KeyClaim, _ string) error {
	if s.releaseErr != nil {
		return s.releaseErr
	}
	if err := s.keys.owned(k.Scope, k.Token, nil); err != nil {
		return err
	}
	s.released = true
	return nil
}

var (
	approved    = answer{decision: app.ProviderApproved}
	declined    = answer{decision: app.ProviderDeclined}
	refused     = answer{err: fmt.Errorf("422: %w", app.ErrProviderRefused)}
	notNow      = answer{err: fmt.Errorf("503: %w", app.ErrProviderNotCharged)}
	lost        = answer{err: fmt.Errorf("timeout: %w", app.ErrProviderOutcomeUnknown)}
	nothing     = answer{err: fmt.Errorf("404: %w", app.ErrNoProviderCharge)}
	fresh       = []claimAnswer{{kind: app.ClaimFresh}}
	resumed     = []claimAnswer{{kind: app.ClaimResumed}}
	errDatabase = fmt.Errorf("%w: connection refused", app.ErrStoreUnavailable)
)

// theWebhookRecords is a provider's event recording the decision under the
// live attempt's claim while its call is out.
func theWebhookRecords(keys *fakeKeys) func(app.KeyClaim) {
	return func(k app.KeyClaim) {
		if err := keys.Complete(context.Background(), k.Scope, k.Token, settledResponse(app.SettledApproved)); err != nil {
			panic(err)
		}
	}
}

// anotherAttemptTakesOver is a retry taking the key over after the live
// attempt's lock ran out, while its call is out.
func anotherAttemptTakesOver(keys *fakeKeys) func(app.KeyClaim) {
	return func(k app.KeyClaim) {
		keys.claim(app.KeyClaim{Scope: k.Scope, CommandHash: k.CommandHash, Token: uuid.New(), LockFor: testLock})
	}
}

// outcome is what a case expects of Handle.
type outcome struct {
	status    int // the response's status; 0 for an error
	body      string
	replayed  bool
	err       error         // errors.Is, or the type of *InProgressError / *OutcomeUnknownError below
	inProg    bool          // an *InProgressError
	unknown   bool          // an *OutcomeUnknownError
	retry     time.Duration // its RetryAfter, to the second
	key       app.RecordStatus
	keyGone   bool
	calls     int
	lookups   int
	recorded  []app.Settlement
	released  bool
	maxTxs    int
	lockEnded bool // the key's lock ended early
}

func TestIdempotentCommandAnswersEveryPhase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		before *app.IdempotencyRecord // the key's record before the request
		// lockLeft sets before's lock to end this long after the subtest
		// starts (negative: ended that long ago).
		lockLeft time.Duration
		steps    func(keys *fakeKeys) *testSteps
		keys     func(keys *fakeKeys)
		bound    time.Duration
		want     outcome
	}{
		// Phase 0: answered from the record, nothing written.
		{name: "replay of a completed key",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordCompleted, Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"first"`)}},
			steps:  func(*fakeKeys) *testSteps { return &testSteps{} },
			want:   outcome{status: 201, body: `"first"`, replayed: true, key: app.RecordCompleted}},
		{name: "the key reused for another command",
			before: &app.IdempotencyRecord{CommandHash: "other", Status: app.RecordCompleted},
			steps:  func(*fakeKeys) *testSteps { return &testSteps{} },
			want:   outcome{err: app.ErrKeyReused, key: app.RecordCompleted}},
		{name: "a duplicate meets a young live claim: come back in a second",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordInProgress, LockToken: uuid.New()}, lockLeft: testLock - time.Second,
			steps: func(*fakeKeys) *testSteps { return &testSteps{} },
			want:  outcome{inProg: true, retry: time.Second, key: app.RecordInProgress}},
		{name: "a duplicate meets a claim past its answer bound: wait for the lock",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordInProgress, LockToken: uuid.New()}, lockLeft: 12 * time.Second,
			steps: func(*fakeKeys) *testSteps { return &testSteps{} },
			want:  outcome{inProg: true, retry: 12 * time.Second, key: app.RecordInProgress}},
		{name: "the database is down before anything",
			steps: func(*fakeKeys) *testSteps { return &testSteps{} },
			keys:  func(k *fakeKeys) { k.lookupErr = errDatabase },
			want:  outcome{err: app.ErrStoreUnavailable, keyGone: true}},

		// Phase 1.
		{name: "an expired claim is taken over and resumed",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordInProgress, LockToken: uuid.New()}, lockLeft: -time.Second,
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: resumed, call: approved} },
			want:  outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "phase 1 answers without a call (second or third layer)",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: app.ErrClaimNeedsTransaction}, {kind: app.ClaimAnswered}}}
			},
			want: outcome{status: 200, body: `"answered in phase 1"`, key: app.RecordCompleted, maxTxs: 1}},
		{name: "the key is held by another record: answered from it, the claim rolled back",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: app.ErrClaimNeedsTransaction}, {kind: app.ClaimKeyHeld}},
					onClaim: func() {
						// Committed between the read and the claim.
						keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "other", Status: app.RecordCompleted}
					}}
			},
			want: outcome{err: app.ErrKeyReused, key: app.RecordCompleted, maxTxs: 1}},
		{name: "the key is completed by another request meanwhile: a replay",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: app.ErrClaimNeedsTransaction}, {kind: app.ClaimKeyHeld}},
					onClaim: func() {
						keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "h", Status: app.RecordCompleted,
							Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"theirs"`)}}
					}}
			},
			want: outcome{status: 201, body: `"theirs"`, replayed: true, key: app.RecordCompleted, maxTxs: 1}},
		{name: "the rows in the way kept changing: retry in a second",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: app.ErrClaimNeedsTransaction}, {err: app.ErrReserveContended}}}
			},
			want: outcome{inProg: true, retry: time.Second, keyGone: true, maxTxs: 1}},
		{name: "a command's own refusal in phase 1 stores nothing",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: app.ErrClaimNeedsTransaction}, {err: errOrderNotFound}}}
			},
			want: outcome{err: errOrderNotFound, keyGone: true, maxTxs: 1}},
		// A refusal decided from state this very key changed: a duplicate
		// read the key before the first request claimed it, and the state
		// after the first request recorded. The key answers, never the
		// refusal.
		{name: "a refusal while the key holds the same command's answer: a replay",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: errNotAuthorized}},
					onClaim: func() {
						keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "h", Status: app.RecordCompleted,
							Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"captured"`)}}
					}}
			},
			want: outcome{status: 201, body: `"captured"`, replayed: true, key: app.RecordCompleted}},
		{name: "a refusal while the same command's claim is live: in progress",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: errNotAuthorized}},
					onClaim: func() {
						keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "h", Status: app.RecordInProgress,
							LockToken: uuid.New(), LockedUntil: time.Now().Add(testLock)}
					}}
			},
			want: outcome{inProg: true, retry: time.Second, key: app.RecordInProgress}},
		{name: "a refusal while another command holds the key: the key is reused",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: errNotAuthorized}},
					onClaim: func() {
						keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "other", Status: app.RecordCompleted}
					}}
			},
			want: outcome{err: app.ErrKeyReused, key: app.RecordCompleted}},
		{name: "a refusal, and the key cannot be read again: the database's answer",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: []claimAnswer{{err: errNotAuthorized}}, onClaim: func() { keys.lookupErr = errDatabase }}
			},
			want: outcome{err: app.ErrStoreUnavailable, keyGone: true}},

		// Phase 2, and what each answer leaves.
		{name: "approved", steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: approved} },
			want: outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "declined", steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: declined} },
			want: outcome{status: 201, body: `"DECLINED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledDeclined}}},
		{name: "a fresh reservation refused for good is FAILED",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: refused} },
			want:  outcome{status: 201, body: `"FAILED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledFailed}}},
		{name: "a fresh reservation not acted on for now gives the key back",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: notNow} },
			want:  outcome{err: app.ErrProviderUnavailable, keyGone: true, calls: 1, released: true}},
		{name: "an unknown answer keeps everything and ends the lock",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: lost} },
			want:  outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1}},
		{name: "an unknown answer, and the lock cannot be ended: the lock's remainder",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: lost} },
			keys:  func(k *fakeKeys) { k.expireErr = errDatabase },
			want:  outcome{unknown: true, retry: testLock, key: app.RecordInProgress, calls: 1}},

		// A resumed reservation's refusal: the provider's record settles it.
		{name: "resumed, refused, the provider holds a charge",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{approved}}
			},
			want: outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, lookups: 1, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "resumed, refused for good, nothing under the key once no earlier request can land",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{nothing}}
			},
			want: outcome{status: 201, body: `"FAILED"`, key: app.RecordCompleted, calls: 1, lookups: 1, recorded: []app.Settlement{app.SettledFailed}}},
		{name: "resumed, refused for good, nothing yet: waits out the bound and finds the late charge",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{nothing, approved}}
			},
			bound: 200 * time.Millisecond,
			want:  outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, lookups: 2, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "resumed, refused for good, nothing before and after the bound: FAILED",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{nothing, nothing}}
			},
			bound: 200 * time.Millisecond,
			want:  outcome{status: 201, body: `"FAILED"`, key: app.RecordCompleted, calls: 1, lookups: 2, recorded: []app.Settlement{app.SettledFailed}}},
		{name: "resumed, refused for good, the bound outlasts the lock: unknown",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{nothing}}
			},
			bound: time.Hour,
			want:  outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1, lookups: 1}},
		{name: "resumed, not acted on for now, nothing under the key: unknown, never released",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: notNow, lookups: []answer{nothing}}
			},
			want: outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1, lookups: 1}},
		// What a provider's silence proves depends on the provider.
		{name: "resumed, refused for good, nothing found at a provider with no request bound: unknown, never FAILED",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, lookups: []answer{nothing},
					abilities: app.ProviderAbilities{Lookup: app.LookupByListing}}
			},
			want: outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1, lookups: 1}},
		{name: "resumed, refused for good, at a provider that cannot be asked: unknown, no lookup",
			steps: func(*fakeKeys) *testSteps {
				return &testSteps{claims: resumed, call: refused, abilities: app.ProviderAbilities{Lookup: app.NoLookup, MaxKeyLength: 64}}
			},
			want: outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1}},
		{name: "resumed, refused, the lookup's answer is lost: unknown",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: resumed, call: refused, lookups: []answer{lost}} },
			want:  outcome{unknown: true, retry: time.Second, key: app.RecordInProgress, lockEnded: true, calls: 1, lookups: 1}},

		// The claim lost after the call: the key says what is true.
		{name: "the webhook recorded the decision before a lost answer: its stored response",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: fresh, call: lost, duringCall: theWebhookRecords(keys)}
			},
			want: outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1}},
		{name: "the webhook recorded the decision before the answer: its stored response",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: fresh, call: approved, duringCall: theWebhookRecords(keys)}
			},
			want: outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1}},
		{name: "the key was taken over during a lost answer: in progress",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: fresh, call: lost, duringCall: anotherAttemptTakesOver(keys)}
			},
			want: outcome{inProg: true, retry: time.Second, key: app.RecordInProgress, calls: 1}},
		{name: "the key was taken over before the answer was recorded: in progress",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: fresh, call: approved, duringCall: anotherAttemptTakesOver(keys)}
			},
			want: outcome{inProg: true, retry: time.Second, key: app.RecordInProgress, calls: 1}},
		{name: "the key was taken over and completed before a release: what the key holds",
			steps: func(keys *fakeKeys) *testSteps {
				return &testSteps{claims: fresh, call: notNow, duringCall: func(k app.KeyClaim) {
					anotherAttemptTakesOver(keys)(k)
					rec, _ := keys.get(k.Scope)
					if err := keys.Complete(context.Background(), k.Scope, rec.LockToken, settledResponse(app.SettledApproved)); err != nil {
						panic(err)
					}
				}}
			},
			want: outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1}},
		{name: "the answer could not be recorded: unknown, until the lock runs out",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: approved, recordErr: errDatabase} },
			want:  outcome{unknown: true, retry: testLock, key: app.RecordInProgress, calls: 1}},
		{name: "the release failed: in progress, until the lock runs out",
			steps: func(*fakeKeys) *testSteps { return &testSteps{claims: fresh, call: notNow, releaseErr: errDatabase} },
			want:  outcome{inProg: true, retry: testLock, key: app.RecordInProgress, calls: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := keysHolding(tc.before, tc.lockLeft)
			db := &fakeDB{keys: keys}
			steps := tc.steps(keys)
			steps.keys = keys
			if steps.abilities == (app.ProviderAbilities{}) {
				// The sandbox's kind; a case without a bound has one that
				// has passed by the time the lookup answers.
				steps.abilities = app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: max(tc.bound, time.Nanosecond)}
			}
			core := app.NewCore(db, nil, testLock, slog.New(slog.DiscardHandler), app.WithAnswerBound(10*time.Second))
			uc := app.NewIdempotentCommand[testCommand, string](core, "test", steps)
			if tc.keys != nil {
				tc.keys(keys)
			}
			res, err := uc.Handle(context.Background(), testCommand{hash: "h"})
			check(t, tc.want, res, err, keys, steps, db)
			if tc.bound > 0 && tc.bound < time.Hour && len(steps.lookedUpAt) == 2 {
				if early := steps.claimedAt.Add(tc.bound).Sub(steps.lookedUpAt[1]); early > 0 {
					t.Errorf("the second lookup came %s before the bound", early)
				}
			}
		})
	}
}

var errOrderNotFound = errors.New("order not found")
var errNotAuthorized = errors.New("the payment is not authorized")

// keysHolding is the key store with before as the key's record, if not
// nil, its lock ending lockLeft from now (unless lockLeft is zero).
func keysHolding(before *app.IdempotencyRecord, lockLeft time.Duration) *fakeKeys {
	keys := &fakeKeys{recs: map[app.IdempotencyScope]app.IdempotencyRecord{}}
	if before != nil {
		rec := *before
		rec.Scope = testScope
		if lockLeft != 0 {
			rec.LockedUntil = time.Now().Add(lockLeft)
		}
		keys.recs[testScope] = rec
	}
	return keys
}

// checkRetryAfter checks a Retry-After: a second exactly, or a lock's
// remainder, which the time the test has taken since it set the lock may
// have shortened by up to two seconds on a loaded machine.
func checkRetryAfter(t *testing.T, got, want time.Duration) {
	t.Helper()
	if want == time.Second && got != want || got > want || got < want-2*time.Second {
		t.Errorf("Retry-After %s, want %s", got, want)
	}
}

func check(t *testing.T, want outcome, res app.CommandResult, err error, keys *fakeKeys, steps *testSteps, db *fakeDB) {
	t.Helper()
	var inProg *app.InProgressError
	var unknown *app.OutcomeUnknownError
	switch {
	case want.inProg:
		if !errors.As(err, &inProg) {
			t.Fatalf("Handle = %+v, %v; want in progress", res, err)
		}
		checkRetryAfter(t, inProg.RetryAfter, want.retry)
	case want.unknown:
		if !errors.As(err, &unknown) {
			t.Fatalf("Handle = %+v, %v; want outcome unknown", res, err)
		}
		checkRetryAfter(t, unknown.RetryAfter, want.retry)
	case want.err != nil:
		if !errors.Is(err, want.err) {
			t.Fatalf("Handle = %+v, %v; want %v", res, err, want.err)
		}
	default:
		if err != nil || res.Response.StatusCode != want.status || string(res.Response.Body) != want.body || res.Replayed != want.replayed {
			t.Fatalf("Handle = %d %s (replayed %v), %v; want %d %s (replayed %v)",
				res.Response.StatusCode, res.Response.Body, res.Replayed, err, want.status, want.body, want.replayed)
		}
	}
	rec, found := keys.get(testScope)
	switch {
	case want.keyGone && found:
		t.Errorf("the key's record is there (%s); want none", rec.Status)
	case !want.keyGone && !found:
		t.Errorf("the key's record is gone; want %s", want.key)
	case found && rec.Status != want.key:
		t.Errorf("the key is %s, want %s", rec.Status, want.key)
	}
	if ended := found && rec.Status == app.RecordInProgress && !rec.LockedUntil.After(time.Now()); ended != want.lockEnded {
		t.Errorf("the lock ended early: %v, want %v", ended, want.lockEnded)
	}
	if steps.calls != want.calls || len(steps.lookedUpAt) != want.lookups {
		t.Errorf("%d provider calls and %d lookups, want %d and %d", steps.calls, len(steps.lookedUpAt), want.calls, want.lookups)
	}
	if fmt.Sprint(steps.recorded) != fmt.Sprint(want.recorded) || steps.released != want.released {
		t.Errorf("recorded %v, released %v; want %v, %v", steps.recorded, steps.released, want.recorded, want.released)
	}
	if db.txs > want.maxTxs {
		t.Errorf("%d transactions, want at most %d", db.txs, want.maxTxs)
	}
}

// keyReadingSteps are testSteps whose claim reads the key first, as the
// charge's statement does (app.KeyReadingSteps): a record the claim
// cannot take over is the answer, written and locked nothing for.
type keyReadingSteps struct{ *testSteps }

func (keyReadingSteps) ClaimReadsKey() {}

func (s keyReadingSteps) Claim(ctx context.Context, r app.Repos, cmd testCommand, k app.KeyClaim) (app.Claimed[string], error) {
	if rec, ok := s.keys.get(k.Scope); ok && !(rec.CommandHash == k.CommandHash && rec.Status == app.RecordInProgress && !rec.LockedUntil.After(time.Now())) {
		return app.Claimed[string]{Kind: app.ClaimKeyHeld, Record: &rec}, nil
	}
	return s.testSteps.Claim(ctx, r, cmd, k)
}

// A command whose claim reads its key is answered from the record the
// claim read: no read of the key before the claim, none after it, and no
// transaction. Only a claim that lost the key to a record it could not
// see reads the key anew.
func TestKeyReadingClaimAnswersFromTheRecordItRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		before   *app.IdempotencyRecord
		lockLeft time.Duration
		claims   []claimAnswer
		onClaim  func(keys *fakeKeys)
		want     outcome
		lookups  int // of the key, by the core
	}{
		{name: "a new key: claimed, called, recorded",
			claims: fresh,
			want:   outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "a replay",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordCompleted, Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"first"`)}},
			want:   outcome{status: 201, body: `"first"`, replayed: true, key: app.RecordCompleted}},
		{name: "a key reused",
			before: &app.IdempotencyRecord{CommandHash: "other", Status: app.RecordCompleted},
			want:   outcome{err: app.ErrKeyReused, key: app.RecordCompleted}},
		{name: "a live claim",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordInProgress, LockToken: uuid.New()}, lockLeft: testLock - time.Second,
			want: outcome{inProg: true, retry: time.Second, key: app.RecordInProgress}},
		{name: "an expired claim: taken over",
			before: &app.IdempotencyRecord{CommandHash: "h", Status: app.RecordInProgress, LockToken: uuid.New()}, lockLeft: -time.Second,
			claims: resumed,
			want:   outcome{status: 201, body: `"APPROVED"`, key: app.RecordCompleted, calls: 1, recorded: []app.Settlement{app.SettledApproved}}},
		{name: "a record committed after the claim's read: read anew",
			claims: []claimAnswer{{kind: app.ClaimKeyHeld}},
			onClaim: func(keys *fakeKeys) {
				keys.recs[testScope] = app.IdempotencyRecord{Scope: testScope, CommandHash: "h", Status: app.RecordCompleted,
					Response: app.StoredResponse{StatusCode: 201, Body: []byte(`"theirs"`)}}
			},
			want:    outcome{status: 201, body: `"theirs"`, replayed: true, key: app.RecordCompleted},
			lookups: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			keys := keysHolding(tc.before, tc.lockLeft)
			steps := &testSteps{keys: keys, claims: tc.claims, call: approved}
			if tc.onClaim != nil {
				steps.onClaim = func() { tc.onClaim(keys) }
			}
			db := &fakeDB{keys: keys}
			core := app.NewCore(db, nil, testLock, slog.New(slog.DiscardHandler), app.WithAnswerBound(10*time.Second))
			uc := app.NewIdempotentCommand[testCommand, string](core, "test", keyReadingSteps{steps})
			res, err := uc.Handle(context.Background(), testCommand{hash: "h"})
			check(t, tc.want, res, err, keys, steps, db)
			if keys.lookups != tc.lookups {
				t.Errorf("the core read the key %d times, want %d", keys.lookups, tc.lookups)
			}
		})
	}
}

// Every command built on a core is one the completer resumes, under its
// own name (Core.Resumable): the service hands the core's commands to the
// completer, and keeps no list of them beside it, so a command added to
// the core cannot be one the completer does not know.
func TestEveryCommandOnTheCoreIsResumable(t *testing.T) {
	t.Parallel()
	core := app.NewCore(&fakeDB{}, nil, testLock, slog.New(slog.DiscardHandler))
	if got := core.Resumable(); len(got) != 0 {
		t.Fatalf("a core with no command resumes %v", got)
	}
	charge := app.NewChargePayment(core, nil)
	refund := app.NewRefundPayment(core, nil)
	capture := app.NewCapturePayment(core, nil)
	void := app.NewVoidPayment(core, nil)
	want := map[app.CommandName]app.Resumable{
		app.CommandCharge: charge, app.CommandRefund: refund, app.CommandCapture: capture, app.CommandVoid: void,
	}
	if got := core.Resumable(); !maps.Equal(got, want) {
		t.Fatalf("the core resumes %v, want %v", got, want)
	}
}
