package repository_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// The lock order of docs/adding-a-command.md, proved on a real server: a
// refund's statements take the payment first, then the refund, then the
// key. Each round races, on one payment of 100.00 whose whole amount an
// old owner's refund holds:
//
//   - the old owner's phase 3, recording its refund DECLINED under its old
//     token (payment, refund, key; the decline gives the 100.00 back);
//   - a takeover's phase 1 with the same key after the old lock ran out
//     (payment, key), then, if it claimed, its own phase 3 (SUCCEEDED);
//   - a new refund's phase 1 of 100.00 under another key on the same
//     payment (payment, its refund, its key), which fits only if the
//     decline committed before it locked the payment.
//
// With deadlock_timeout lowered to 10 ms, a cycle between two of them
// would surface within the round as SQLSTATE 40P01. None ever does, and
// the fencing token lets exactly one of the two owners' decisions be
// recorded. Reversing the order in recordRefundOutcomeSQL alone (the key
// completed before the payment is locked) fails this test with 40P01.
func TestRefundPhasesTakeLocksInOneOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openWithDeadlockTimeout(t, "10ms")
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Refunds
	tx := repository.NewTransactor(db)

	const rounds = 100
	var oldWon, newcomerReserved int
	for round := range rounds {
		r := raceRefundPhases(t, ctx, db, store, tx, round)
		if t.Failed() {
			return
		}
		if r.oldRecorded {
			oldWon++
		}
		if r.newcomerReserved {
			newcomerReserved++
		}
	}
	t.Logf("%d rounds: the old owner recorded %d, the takeover %d; the new refund fitted in %d",
		rounds, oldWon, rounds-oldWon, newcomerReserved)
}

// roundResult is what one round of raceRefundPhases decided.
type roundResult struct {
	oldRecorded      bool // the old owner's DECLINED is the refund's decision
	newcomerReserved bool // the new refund reserved the amount the decline gave back
}

// raceRefundPhases runs one round of TestRefundPhasesTakeLocksInOneOrder
// on a payment of its own, and checks the tables after it.
func raceRefundPhases(t *testing.T, ctx context.Context, db *gorm.DB, store app.RefundStore, tx *repository.Transactor, round int) roundResult {
	t.Helper()
	order := int64(30000 + round)
	p := addPayment(t, db, "demo-client", order, "100.00", "RUB", domain.PaymentSucceeded)
	key := fmt.Sprintf("lock-order-%d", round)
	old := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: key}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
	res, err := store.Claim(ctx, old, newRefund(t, p, "100.00", "re_old_"+key))
	if err != nil || !res.Claimed || !res.Reserved || res.Refund == nil {
		t.Fatalf("round %d: the old owner's phase 1: %+v %v", round, res, err)
	}
	refund := *res.Refund
	// The old owner's lock runs out (its provider answer took too long).
	if err := db.Exec(`UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '1 second'
		WHERE idempotency_key = ?`, key).Error; err != nil {
		t.Fatal(err)
	}

	takeover := old
	takeover.Token = uuid.New()
	again, another := newRefund(t, p, "100.00", "re_old_"+key), newRefund(t, p, "100.00", "re_new_"+key)
	newcomer := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "new-" + key}, CommandHash: "h2", Token: uuid.New(), LockFor: time.Minute}
	var (
		oldErr, takeoverErr, takeoverRecordErr, newcomerErr error
		takeoverClaimed, newcomerReserved                   bool
	)
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-start
		oldErr = recordRefund(ctx, store, old, refund, domain.RefundDeclined, order)
	})
	wg.Go(func() {
		<-start
		takeoverClaimed, takeoverErr = refundPhase1(ctx, store, tx, takeover, again)
		if takeoverErr == nil && takeoverClaimed {
			takeoverRecordErr = recordRefund(ctx, store, takeover, refund, domain.RefundSucceeded, order)
		}
	})
	wg.Go(func() {
		<-start
		newcomerReserved, newcomerErr = refundPhase1(ctx, store, tx, newcomer, another)
	})
	close(start)
	wg.Wait()

	for what, err := range map[string]error{"the old owner's phase 3": oldErr, "the takeover's phase 1": takeoverErr,
		"the takeover's phase 3": takeoverRecordErr, "the new refund's phase 1": newcomerErr} {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("round %d: %s deadlocked: %v", round, what, err)
		}
	}
	oldRecorded := oldErr == nil
	switch {
	case t.Failed():
		return roundResult{}
	case oldErr != nil && !errors.Is(oldErr, app.ErrLockLost):
		t.Errorf("round %d: the old owner's phase 3: %v", round, oldErr)
	case takeoverErr != nil || takeoverRecordErr != nil || newcomerErr != nil:
		t.Errorf("round %d: old %v, takeover %v (claimed %v), its record %v, new refund %v", round, oldErr, takeoverErr, takeoverClaimed, takeoverRecordErr, newcomerErr)
	case oldRecorded == takeoverClaimed:
		// Fencing: the takeover claims only a key still in progress, and
		// the old token records only if it still owns the key.
		t.Errorf("round %d: the old owner recorded: %v, the takeover claimed: %v; want exactly one", round, oldRecorded, takeoverClaimed)
	}

	want := map[bool]string{true: "DECLINED", false: "SUCCEEDED"}[oldRecorded]
	var got struct {
		Status string
		Events int64
		Key    string
	}
	if err := db.Raw(`SELECT (SELECT status FROM refund WHERE id = ?) AS status,
		       (SELECT count(*) FROM outbox_event WHERE payload->>'refundId' = ?) AS events,
		       (SELECT status FROM idempotency_record WHERE idempotency_key = ?) AS key`,
		int64(refund.ID), fmt.Sprint(int64(refund.ID)), key).Scan(&got).Error; err != nil {
		t.Fatal(err)
	}
	if got.Status != want || got.Events != 1 || got.Key != "COMPLETED" {
		t.Errorf("round %d: refund %s with %d events, key %s; want %s, 1 event, COMPLETED", round, got.Status, got.Events, got.Key, want)
	}
	// The refund total: what counts, within the amount; the new refund fits
	// only in the room the decline gave back.
	reserved, counted := refundTotal(t, db, p.ID)
	if reserved != counted || (newcomerReserved && !oldRecorded) || (reserved != "100.00" && reserved != "0.00") {
		t.Errorf("round %d: refund_reserved %s, counted %s, new refund reserved %v after decline %v",
			round, reserved, counted, newcomerReserved, oldRecorded)
	}
	return roundResult{oldRecorded: oldRecorded, newcomerReserved: newcomerReserved}
}

// refundPhase1 runs a refund's phase 1 as the core does: the statement on
// its own, which commits only a claim with a PENDING refund to make; for
// any other answer the same statement in a transaction, committed when it
// now has a refund to make (a decline committed in between gave the room
// back) and rolled back otherwise (the core would store or answer it; this
// test only needs to know that nothing was claimed). It answers whether
// the key was claimed with a refund to make.
func refundPhase1(ctx context.Context, store app.RefundStore, tx *repository.Transactor, k app.KeyClaim, r domain.Refund) (bool, error) {
	res, err := store.Claim(ctx, k, r)
	if err == nil {
		return res.Claimed && res.Refund != nil, nil
	}
	if !errors.Is(err, app.ErrClaimNeedsTransaction) {
		return false, err
	}
	errNothingToMake := errors.New("no refund to make: roll back")
	err = tx.Transact(ctx, func(ctx context.Context, repos app.Repos) error {
		res, err = repos.Refunds.Claim(ctx, k, r)
		switch {
		case err != nil:
			return err
		case res.Claimed && res.Refund != nil && res.Refund.Status == domain.RefundPending:
			return nil
		default:
			return errNothingToMake
		}
	})
	if errors.Is(err, errNothingToMake) {
		return false, nil
	}
	return err == nil, err
}

// recordRefund runs a refund's phase 3 under k's token with status.
func recordRefund(ctx context.Context, store app.RefundStore, k app.KeyClaim, refund domain.Refund, status domain.RefundStatus, order int64) error {
	refund.Status = status
	ev, err := app.NewRefundEvent(refund, domain.OrderID(order), uuid.NullUUID{}, time.Now())
	if err != nil {
		return err
	}
	return store.Record(ctx, app.RefundRecord{Key: app.KeyClaim{Scope: k.Scope, Token: k.Token},
		Response: app.StoredResponse{StatusCode: 200, Body: []byte(`{}`)}, Event: ev})
}

// openWithDeadlockTimeout opens a database of the test's own whose
// connections look for a deadlock after timeout instead of the server's
// 1 s, so a cycle of lock waits fails fast with 40P01, and commit without
// waiting for the disk.
func openWithDeadlockTimeout(t *testing.T, timeout string) *gorm.DB {
	t.Helper()
	u, err := url.Parse(testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("deadlock_timeout", timeout) // a start-up setting of every connection
	// Many small commits: no wait for the disk, which changes no lock.
	q.Set("synchronous_commit", "off")
	u.RawQuery = q.Encode()
	db, err := repository.Open(u.String(), repository.PoolConfig{MaxOpenConns: 20}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	var got string
	if err := db.Raw(`SHOW deadlock_timeout`).Scan(&got).Error; err != nil || got != timeout {
		t.Fatalf("deadlock_timeout = %q, %v; want %s", got, err, timeout)
	}
	return db
}

// A reservation that waited for the payment's lock while a decline gave
// the whole amount back fits in that room, and its total is computed on
// the row it locked: the statement's snapshot, taken before the wait,
// still holds the old total (100.00), and a total computed on it broke the
// CHECK on refund_reserved (100.00 + 100.00) instead of reserving.
func TestRefundReservedAfterWaitingForADecline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, refunds := openRefunds(t)
	p := addPayment(t, db, "demo-client", 9201, "100.00", "RUB", domain.PaymentSucceeded)
	first, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, p, "100.00", "re_declined"))
	if err != nil || first.Kind != app.RefundReserved {
		t.Fatalf("first reservation: %+v, %v", first, err)
	}

	// The decline, in a transaction held open: the amount is given back,
	// and the payment stays locked until the commit.
	decline := db.Begin()
	if err := repository.NewRefunds(decline).SettleRefund(ctx, first.Refund.ID, domain.RefundDeclined); err != nil {
		t.Fatal(err)
	}
	type reservation struct {
		res app.RefundReservation
		err error
	}
	done := make(chan reservation, 1)
	go func() {
		res, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, p, "100.00", "re_after"))
		done <- reservation{res, err}
	}()
	waitForALockWait(t, db)
	if err := decline.Commit().Error; err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.Kind != app.RefundReserved || got.res.RefundReserved.StringFixed(2) != "100.00" {
		t.Fatalf("the reservation after the decline: %+v, %v; want reserved, total 100.00", got.res, got.err)
	}
	if reserved, counted := refundTotal(t, db, p.ID); reserved != "100.00" || counted != "100.00" {
		t.Fatalf("refund_reserved = %s, counted %s; want 100.00 both", reserved, counted)
	}
}

// waitForALockWait returns once a session of db's database waits for a
// lock; it fails the test if none does within a minute.
func waitForALockWait(t *testing.T, db *gorm.DB) {
	t.Helper()
	for range 6000 {
		var waiting int64
		if err := db.Raw(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting).Error; err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no session waited for a lock within a minute")
}

// The old owner's phase 3, waiting for the payment's lock while a takeover
// claims the key and commits, writes nothing and is told ErrLockLost (the
// core answers 409 request-in-progress), not a record error: the
// statement's snapshot, taken before the wait, still shows its token, so
// only a new look at the key can tell.
func TestRefundRecordThatWaitedForATakeoverLostTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openRefunds(t)
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Refunds
	p := addPayment(t, db, "demo-client", 9202, "100.00", "RUB", domain.PaymentSucceeded)
	old := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "waited"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
	res, err := store.Claim(ctx, old, newRefund(t, p, "40.00", "re_waited"))
	if err != nil || !res.Reserved || res.Refund == nil {
		t.Fatalf("the old owner's phase 1: %+v %v", res, err)
	}
	if err := db.Exec(`UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '1 second' WHERE idempotency_key = 'waited'`).Error; err != nil {
		t.Fatal(err)
	}

	// The takeover's phase 1, in a transaction held open: it holds the
	// payment's lock and has claimed the key with its own token.
	takeover := old
	takeover.Token = uuid.New()
	claim := db.Begin()
	taken, err := repository.InTransaction(claim).Refunds.Claim(ctx, takeover, newRefund(t, p, "40.00", "re_waited"))
	if err != nil || !taken.Claimed || taken.Reserved {
		claim.Rollback()
		t.Fatalf("the takeover's phase 1: %+v %v", taken, err)
	}
	done := make(chan error, 1)
	go func() { done <- recordRefund(ctx, store, old, *res.Refund, domain.RefundDeclined, 9202) }()
	waitForALockWait(t, db)
	if err := claim.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("the old owner's phase 3 after the takeover: %v, want ErrLockLost", err)
	}
	var status string
	if err := db.Raw(`SELECT status FROM refund WHERE id = ?`, int64(res.Refund.ID)).Scan(&status).Error; err != nil || status != "PENDING" {
		t.Fatalf("the refund is %s (%v) after a fenced-out record, want PENDING", status, err)
	}
}
