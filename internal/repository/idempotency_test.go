package repository_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func openDB(t testing.TB) (*gorm.DB, *repository.Transactor) {
	t.Helper()
	return openDBOn(t, testdb.New(t))
}

// openDBOn is openDB on the database dsn, for a test that also connects
// to it on its own.
func openDBOn(t testing.TB, dsn string) (*gorm.DB, *repository.Transactor) {
	t.Helper()
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 60}, slog.New(slog.NewTextHandler(io.Discard, nil)))
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

var errNotClaimed = errors.New("not claimed")

// claim runs the charge's phase-1 statement in a transaction, and rolls it
// back when the key was not claimed, as ChargePayment does.
func claim(ctx context.Context, tx *repository.Transactor, key, hash string, token uuid.UUID, charge domain.Charge) (app.ChargeClaimed, error) {
	var res app.ChargeClaimed
	err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) (err error) {
		res, err = r.Charges.Claim(ctx, app.KeyClaim{
			Scope: app.IdempotencyScope{ClientID: "demo-client", Key: key}, CommandHash: hash,
			Token: token, LockFor: time.Minute}, charge)
		if err == nil && !res.Claimed {
			return errNotClaimed
		}
		return err
	})
	if errors.Is(err, errNotClaimed) {
		err = nil
	}
	return res, err
}

func newCharge(t testing.TB, order int64, amount, external string) domain.Charge {
	t.Helper()
	money, err := domain.NewMoney(decimal.RequireFromString(amount), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(domain.OrderID(order), 42, money, "sandbox", domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func addOrder(t testing.TB, db *gorm.DB, order int64, amount string) {
	t.Helper()
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (?, 42, ?, 'RUB')`, order, amount).Error; err != nil {
		t.Fatal(err)
	}
}

// The claim is one atomic statement, in a transaction or on its own: of
// many concurrent charges with one key and one command, exactly one claims
// the key and reserves the payment; every other sees the key held, or on
// its own rolls back.
func TestClaimIsAtomicUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, way := range []struct {
		name  string
		claim func(ctx context.Context, db *gorm.DB, tx *repository.Transactor, charge domain.Charge) (app.ChargeClaimed, error)
	}{
		{"in a transaction", func(ctx context.Context, _ *gorm.DB, tx *repository.Transactor, charge domain.Charge) (app.ChargeClaimed, error) {
			return claim(ctx, tx, "k", "h", uuid.New(), charge)
		}},
		{"on its own", func(ctx context.Context, db *gorm.DB, _ *repository.Transactor, charge domain.Charge) (app.ChargeClaimed, error) {
			res, err := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{})).AutoCommit().Charges.Claim(ctx, app.KeyClaim{
				Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "k"}, CommandHash: "h",
				Token: uuid.New(), LockFor: time.Minute}, charge)
			switch {
			case errors.Is(err, app.ErrClaimNeedsTransaction):
				return app.ChargeClaimed{}, nil // rolled back: not claimed
			case err == nil && !res.Claimed && res.Standing == nil:
				return res, fmt.Errorf("on its own, it committed an answer that is neither a claim nor the record in its way: %+v", res)
			}
			return res, err
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			t.Parallel()
			claimsConcurrently(t, way.claim)
		})
	}
}

func claimsConcurrently(t *testing.T, claim func(ctx context.Context, db *gorm.DB, tx *repository.Transactor, charge domain.Charge) (app.ChargeClaimed, error)) {
	db, tx := openDB(t)
	ctx := context.Background()
	addOrder(t, db, 1001, "10.00")
	charge := newCharge(t, 1001, "10.00", "pi_1")

	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners, losers int
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res, err := claim(ctx, db, tx, charge)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("claim: %v", err)
			case res.Claimed && res.Reserved:
				winners++
			case res.Claimed:
				t.Errorf("claimed without the reservation: %+v", res)
			default:
				losers++
			}
		})
	}
	close(start)
	wg.Wait()
	if winners != 1 || losers != n-1 {
		t.Fatalf("winners = %d, losers = %d; want exactly one winner", winners, losers)
	}
	if n := countRows(t, db, `SELECT count(*) FROM payment`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	if n := countRows(t, db, `SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id WHERE r.status = 'IN_PROGRESS'`); n != 1 {
		t.Fatalf("claims linked to their payment = %d, want 1", n)
	}
}

// Every branch of claimAndReserveSQL, one step after the other on one
// database: what the statement answers, and what it leaves behind.
func TestClaimAndReserveStatement(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	addOrder(t, db, 1, "10.00")
	addOrder(t, db, 2, "20.00")
	first, second := uuid.New(), uuid.New()
	var firstPayment domain.PaymentID

	steps := []struct {
		name   string
		before string // SQL run first
		key    string
		hash   string
		token  uuid.UUID
		charge domain.Charge
		check  func(t *testing.T, res app.ChargeClaimed)
	}{
		// Without the command column's default, which releases older than
		// the column rely on (the contract step drops it), as the claim
		// must work then.
		{name: "new key, matching order: claimed and reserved, linked", before: `ALTER TABLE idempotency_record ALTER COLUMN command DROP DEFAULT`, key: "k1", hash: "h1", token: first, charge: newCharge(t, 1, "10.00", "e1"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || !res.Reserved || !res.OrderMatches || res.Payment == nil || res.Payment.Status != domain.PaymentPending {
					t.Fatalf("%+v", res)
				}
				firstPayment = res.Payment.ID
				if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k1' AND payment_id = ? AND lock_token = ?`, int64(firstPayment), first); n != 1 {
					t.Fatal("the claim does not point at its payment")
				}
				// The jobs read payment_id as a charge's only in the
				// charge's records.
				if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k1' AND command = ?`, string(app.CommandCharge)); n != 1 {
					t.Fatalf("the claim does not name its command %q", app.CommandCharge)
				}
			}},
		{name: "same key, lock live: not claimed", key: "k1", hash: "h1", token: second, charge: newCharge(t, 1, "10.00", "e1"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if res.Claimed {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "same key, another command: not claimed, nothing reserved, the key's record", key: "k1", hash: "h2", token: second, charge: newCharge(t, 2, "20.00", "e2"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if res.Claimed || res.Reserved || res.Standing == nil || res.Standing.CommandHash != "h1" {
					t.Fatalf("%+v: the statement should have read the key's record and written nothing", res)
				}
				if n := countRows(t, db, `SELECT count(*) FROM payment WHERE order_id = 2`); n != 0 {
					t.Fatalf("payments of order 2 = %d, want 0 after the rollback", n)
				}
			}},
		{name: "lock expired, another command: not taken over", before: `UPDATE idempotency_record SET locked_until = now() - interval '1 second'`,
			key: "k1", hash: "h2", token: second, charge: newCharge(t, 2, "20.00", "e2"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if res.Claimed {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "lock expired, same command: taken over, the recovery point resumed", key: "k1", hash: "h1", token: second, charge: newCharge(t, 1, "10.00", "e1"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || res.Reserved || res.Payment == nil || res.Payment.ID != firstPayment {
					t.Fatalf("%+v, want the takeover of payment %d", res, firstPayment)
				}
				if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k1' AND lock_token = ?`, second); n != 1 {
					t.Fatal("the takeover did not fence the old owner out with a new token")
				}
			}},
		{name: "lock expired, same command hash, but another command's record: not taken over",
			before: `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
				VALUES ('demo-client', 'k6', 'refund', 'h7', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 second')`,
			key: "k6", hash: "h7", token: second, charge: newCharge(t, 2, "20.00", "e6"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if res.Claimed {
					t.Fatalf("%+v", res)
				}
				if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k6' AND command = 'refund' AND lock_token <> ?`, second); n != 1 {
					t.Fatal("the refund's record changed hands")
				}
			}},
		{name: "new key, the external payment exists: claimed, nothing reserved", key: "k2", hash: "h3", token: first, charge: newCharge(t, 2, "20.00", "e1"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || res.Reserved || !res.OrderMatches || res.Payment != nil {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "new key, the order has a live payment: claimed, nothing reserved", key: "k3", hash: "h4", token: first, charge: newCharge(t, 1, "10.00", "e3"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || res.Reserved || !res.OrderMatches || res.Payment != nil {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "unknown order: claimed, no match", key: "k4", hash: "h5", token: first, charge: newCharge(t, 3, "10.00", "e4"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || res.Reserved || res.OrderMatches {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "amount differs from the order: no match", key: "k5", hash: "h6", token: first, charge: newCharge(t, 2, "20.01", "e5"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if !res.Claimed || res.Reserved || res.OrderMatches {
					t.Fatalf("%+v", res)
				}
			}},
		{name: "a completed key: not claimed", before: `UPDATE idempotency_record SET status = 'COMPLETED', response = '{}', http_status = 409, lock_token = NULL, locked_until = NULL WHERE idempotency_key = 'k2'`,
			key: "k2", hash: "h3", token: second, charge: newCharge(t, 2, "20.00", "e1"),
			check: func(t *testing.T, res app.ChargeClaimed) {
				if res.Claimed {
					t.Fatalf("%+v", res)
				}
			}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.before != "" {
				if err := db.Exec(st.before).Error; err != nil {
					t.Fatal(err)
				}
			}
			res, err := claim(ctx, tx, st.key, st.hash, st.token, st.charge)
			if err != nil {
				t.Fatal(err)
			}
			st.check(t, res)
		})
	}
}

// recordOutcomeSQL writes the key's outcome, the payment's status and the
// event together, only for the claim's owner, and only from PENDING.
func TestRecordOutcomeStatement(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Charges
	addOrder(t, db, 1, "10.00")
	owner := uuid.New()
	res, err := claim(ctx, tx, "k", "h", owner, newCharge(t, 1, "10.00", "e1"))
	if err != nil || !res.Reserved {
		t.Fatalf("claim: %+v %v", res, err)
	}
	decided := *res.Payment
	decided.Status = domain.PaymentSucceeded
	event, err := app.NewPaymentEvent(decided, uuid.NullUUID{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	scope := app.IdempotencyScope{ClientID: "demo-client", Key: "k"}
	// json (not jsonb) keeps the bytes exactly, odd spacing and key order included.
	resp := app.StoredResponse{StatusCode: 201, Body: []byte(`{"b": 1,  "a":2}`)}
	state := func() (string, string, int) {
		var rec, pay string
		if err := db.Raw(`SELECT status FROM idempotency_record WHERE idempotency_key = 'k'`).Scan(&rec).Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Raw(`SELECT status FROM payment WHERE id = ?`, int64(decided.ID)).Scan(&pay).Error; err != nil {
			t.Fatal(err)
		}
		return rec, pay, countRows(t, db, `SELECT count(*) FROM outbox_event`)
	}

	err = store.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: scope, Token: uuid.New()}, Response: resp, Event: event})
	if !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("another token: %v, want ErrLockLost", err)
	}
	if rec, pay, events := state(); rec != "IN_PROGRESS" || pay != "PENDING" || events != 0 {
		t.Fatalf("after a fenced-out write: %s %s %d events; want nothing changed", rec, pay, events)
	}

	if err := db.Exec(`UPDATE payment SET status = 'DECLINED' WHERE id = ?`, int64(decided.ID)).Error; err != nil {
		t.Fatal(err)
	}
	if err := store.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: scope, Token: owner}, Response: resp, Event: event}); err == nil || errors.Is(err, app.ErrLockLost) {
		t.Fatalf("payment not PENDING: %v, want an error that is not ErrLockLost", err)
	}
	if rec, _, events := state(); rec != "IN_PROGRESS" || events != 0 {
		t.Fatalf("after a refused write: %s, %d events; want nothing changed", rec, events)
	}
	if err := db.Exec(`UPDATE payment SET status = 'PENDING' WHERE id = ?`, int64(decided.ID)).Error; err != nil {
		t.Fatal(err)
	}

	if err := store.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: scope, Token: owner}, Response: resp, Event: event}); err != nil {
		t.Fatal(err)
	}
	if rec, pay, events := state(); rec != "COMPLETED" || pay != "SUCCEEDED" || events != 1 {
		t.Fatalf("after the owner's write: %s %s %d events; want COMPLETED, SUCCEEDED, 1 event", rec, pay, events)
	}
	got, found, err := tx.AutoCommit().Keys.Lookup(ctx, scope)
	if err != nil || !found || got.Status != app.RecordCompleted || got.Response.StatusCode != 201 || string(got.Response.Body) != string(resp.Body) {
		t.Fatalf("stored %+v %v %v, want %s", got, found, err, resp.Body)
	}
	if err := store.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: scope, Token: owner}, Response: resp, Event: event}); !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("a second write: %v, want ErrLockLost (the claim has ended)", err)
	}
	if _, _, events := state(); events != 1 {
		t.Fatalf("events = %d after a second write, want 1", events)
	}
}

// Release and Complete are fenced by the lock token too: once a retry has
// taken an expired claim over, the old owner can neither complete nor
// release it.
func TestReleaseAndCompleteAreFencedByLockToken(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	addOrder(t, db, 1, "10.00")
	old, fresh := uuid.New(), uuid.New()
	charge := newCharge(t, 1, "10.00", "e1")
	if res, err := claim(ctx, tx, "k", "h", old, charge); err != nil || !res.Claimed {
		t.Fatalf("first claim: %+v %v", res, err)
	}
	if err := db.Exec(`UPDATE idempotency_record SET locked_until = now() - interval '1 second'`).Error; err != nil {
		t.Fatal(err)
	}
	taken, err := claim(ctx, tx, "k", "h", fresh, charge)
	if err != nil || !taken.Claimed {
		t.Fatalf("takeover: %+v %v", taken, err)
	}
	scope := app.IdempotencyScope{ClientID: "demo-client", Key: "k"}
	for name, write := range map[string]func(r app.Repos) error{
		"Complete": func(r app.Repos) error {
			return r.Keys.Complete(ctx, scope, old, app.StoredResponse{StatusCode: 201, Body: []byte(`{}`)})
		},
		"Release": func(r app.Repos) error {
			return r.Charges.Release(ctx, app.KeyClaim{Scope: scope, Token: old}, taken.Payment.ID)
		},
		"ExpireLock": func(r app.Repos) error { return r.Keys.ExpireLock(ctx, scope, old) },
	} {
		err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error { return write(r) })
		if !errors.Is(err, app.ErrLockLost) {
			t.Errorf("old owner's %s = %v, want ErrLockLost", name, err)
		}
	}
	if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND lock_token = ?`, fresh); n != 1 {
		t.Fatal("the new owner's claim was touched")
	}
	if n := countRows(t, db, `SELECT count(*) FROM payment WHERE status = 'PENDING'`); n != 1 {
		t.Fatal("the old owner's release deleted the new owner's payment")
	}
}

func TestStoreUnavailableIsMapped(t *testing.T) {
	t.Parallel()
	db, err := repository.Open("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
		repository.PoolConfig{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = claim(context.Background(), repository.NewTransactor(db), "k", "h", uuid.New(), newCharge(t, 1, "1", "e"))
	if !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("claim: err = %v, want ErrStoreUnavailable", err)
	}
	_, _, err = repository.NewTransactor(db).AutoCommit().Keys.Lookup(context.Background(), app.IdempotencyScope{ClientID: "c", Key: "k"})
	if !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("lookup: err = %v, want ErrStoreUnavailable", err)
	}
	if err := repository.Ping(context.Background(), db); !errors.Is(err, app.ErrStoreUnavailable) {
		t.Fatalf("Ping = %v, want ErrStoreUnavailable", err)
	}
}

// The replay read takes no lock and writes nothing: it answers at once while
// another transaction holds the record's row lock (the claim's INSERT ... ON
// CONFLICT DO UPDATE would wait for that lock, even when its WHERE updates
// nothing), and the row's version (xmin) is the same afterwards.
func TestLookupKeyTakesNoLockAndWritesNothing(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	keys := tx.AutoCommit().Keys
	addOrder(t, db, 1, "10.00")
	if _, err := claim(ctx, tx, "k", "h", uuid.New(), newCharge(t, 1, "10.00", "e1")); err != nil {
		t.Fatal(err)
	}
	version := func() string {
		var xmin string
		if err := db.Raw(`SELECT xmin::text FROM idempotency_record WHERE idempotency_key = 'k'`).Scan(&xmin).Error; err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	before := version()

	// Another transaction holds the row lock until the end of the test.
	holder := db.Begin()
	t.Cleanup(func() { holder.Rollback() })
	var locked int
	if err := holder.Raw(`SELECT 1 FROM idempotency_record WHERE idempotency_key = 'k' FOR UPDATE`).Scan(&locked).Error; err != nil || locked != 1 {
		t.Fatalf("lock the record: %v", err)
	}

	lookupCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rec, found, err := keys.Lookup(lookupCtx, app.IdempotencyScope{ClientID: "demo-client", Key: "k"})
	if err != nil || !found || rec.Status != app.RecordInProgress || rec.CommandHash != "h" {
		t.Fatalf("lookup under a held row lock: %+v %v %v; want the IN_PROGRESS record at once", rec, found, err)
	}
	if after := version(); after != before {
		t.Fatalf("xmin %s -> %s: the lookup wrote the row", before, after)
	}
}

// The charge's phase 3 after waiting for the key's lock, held by a takeover
// that then commits: the fenced completion matches nothing, and the old
// owner is told ErrLockLost, though the statement's snapshot, taken before
// the wait, still showed its token (recordOutcome asks the key again).
func TestRecordOutcomeThatWaitedForATakeoverLostTheLock(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Charges
	addOrder(t, db, 2, "10.00")
	old := uuid.New()
	charge := newCharge(t, 2, "10.00", "e-waited")
	res, err := claim(ctx, tx, "waited", "h", old, charge)
	if err != nil || !res.Reserved {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if err := db.Exec(`UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '1 second' WHERE idempotency_key = 'waited'`).Error; err != nil {
		t.Fatal(err)
	}

	// The takeover's phase 1, in a transaction that stays open (holding
	// the key's row) until release.
	claimed, release, takenOver := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		takenOver <- tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
			res, err := r.Charges.Claim(ctx, app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "waited"},
				CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}, charge)
			if err == nil && !res.Claimed {
				err = errNotClaimed
			}
			claimed <- err
			<-release
			return err
		})
	}()
	if err := <-claimed; err != nil {
		close(release)
		t.Fatalf("the takeover: %v", err)
	}
	decided := *res.Payment
	decided.Status = domain.PaymentSucceeded
	event, err := app.NewPaymentEvent(decided, uuid.NullUUID{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	recorded := make(chan error, 1)
	go func() {
		recorded <- store.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "waited"},
			Token: old}, Response: app.StoredResponse{StatusCode: 201, Body: []byte(`{}`)}, Event: event})
	}()
	waitForALockWait(t, db)
	close(release)
	if err := <-takenOver; err != nil {
		t.Fatal(err)
	}
	if err := <-recorded; !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("the old owner's phase 3 after the takeover: %v, want ErrLockLost", err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM payment WHERE status = 'PENDING'`); got != 1 {
		t.Fatal("the fenced-out record changed the payment")
	}
}
