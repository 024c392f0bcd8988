package repository_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// A refund the provider received, through its statements: the receipt is
// written by the claim's owner only, and completes the key with the 202
// while the refund stays PENDING, its amount reserved, listed as awaiting
// the provider. Its settlement is once: of two at the same time exactly
// one writes (the status, the amount given back, one event), the other
// and any later one write nothing and say so without an error; a PENDING
// refund that was never received is not the settlement's
// (app.ErrNotReceived).
func TestAReceivedRefundIsSettledOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tx := openDB(t)
	pool := tx.AutoCommit()
	p := addPayment(t, db, "demo-client", 9401, "100.00", "RUB", domain.PaymentSucceeded)
	owner := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "received-refund"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
	res, err := pool.Refunds.Claim(ctx, owner, newRefund(t, p, "100.00", "re_received"))
	if err != nil || !res.Claimed || !res.Reserved {
		t.Fatalf("the claim: %+v, %v", res, err)
	}
	refund := *res.Refund
	settle := func(status domain.PaymentStatus) (bool, error) {
		r := refund
		r.Status = status
		ev, err := app.NewRefundEvent(r, p.Charge.OrderID, uuid.NullUUID{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return pool.Refunds.SettleReceived(ctx, ev)
	}

	if _, err := settle(domain.PaymentFailed); !errors.Is(err, app.ErrNotReceived) {
		t.Fatalf("settling a refund not received: %v, want ErrNotReceived", err)
	}
	resp := app.StoredResponse{StatusCode: 202, Body: []byte(`{"status":"PENDING"}`)}
	stranger := owner
	stranger.Token = uuid.New()
	if err := pool.Refunds.RecordReceived(ctx, stranger, resp, refund.ID); !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("a stranger's receipt: %v, want ErrLockLost", err)
	}
	if err := pool.Refunds.RecordReceived(ctx, owner, resp, refund.ID); err != nil {
		t.Fatalf("the owner's receipt: %v", err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'received-refund' AND status = 'COMPLETED' AND http_status = 202`); n != 1 {
		t.Fatal("the key is not completed with the 202")
	}
	if n := countRows(t, db, `SELECT count(*) FROM refund WHERE id = ? AND status = 'PENDING' AND received_at IS NOT NULL`, refund.ID); n != 1 {
		t.Fatal("the refund is not PENDING and awaiting the provider")
	}
	listed, err := pool.Refunds.ListReceived(ctx, 0, 10)
	if err != nil || len(listed) != 1 || listed[0].ProviderKey != refund.ProviderIdempotencyKey() || listed[0].Object != app.ObjectRefund {
		t.Fatalf("the received refunds: %+v, %v", listed, err)
	}
	if later, err := pool.Refunds.ListReceived(ctx, time.Hour, 10); err != nil || len(later) != 0 {
		t.Fatalf("the refunds received more than an hour ago: %+v, %v", later, err)
	}

	var wg sync.WaitGroup
	results := make([]bool, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = settle(domain.PaymentFailed) })
	}
	wg.Wait()
	if errors.Join(errs...) != nil || results[0] == results[1] {
		t.Fatalf("two settlements at once: %v, %v; want one of them to settle, neither to fail", results, errs)
	}
	if settled, err := settle(domain.PaymentSucceeded); settled || err != nil {
		t.Fatalf("a later settlement: %v, %v; want nothing written, no error", settled, err)
	}
	if n := countRows(t, db, `SELECT count(*) FROM refund WHERE id = ? AND status = 'FAILED' AND received_at IS NULL`, refund.ID); n != 1 {
		t.Fatal("the refund is not FAILED, awaiting no more")
	}
	if n := countRows(t, db, `SELECT count(*) FROM payment WHERE id = ? AND refund_reserved = 0`, p.ID); n != 1 {
		t.Fatal("the failed refund's amount was not given back")
	}
	if n := countRows(t, db, `SELECT count(*) FROM outbox_event WHERE event_type = 'RefundFailed.v1'`); n != 1 {
		t.Fatalf("%d RefundFailed.v1 rows, want 1", n)
	}
	if listed, err := pool.Refunds.ListReceived(ctx, 0, 10); err != nil || len(listed) != 0 {
		t.Fatalf("the received refunds once settled: %+v, %v", listed, err)
	}
}
