package repository_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
)

// The refund's phase 3 statement, branch by branch: only the claim that
// still owns the key writes anything (the refund's status, the amount given
// back, the record, the event), and it writes all of it, once.
func TestRecordRefundOutcomeStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openRefunds(t)
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Refunds
	p := addPayment(t, db, "demo-client", 9101, "100.00", "RUB", domain.PaymentSucceeded)

	owner := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "refund-key"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
	res, err := store.Claim(ctx, owner, newRefund(t, p, "30.00", "re_phase3"))
	if err != nil || !res.Claimed || !res.Reserved || res.Refund == nil {
		t.Fatalf("phase 1: %+v %v", res, err)
	}
	declined := *res.Refund
	declined.Status = domain.RefundDeclined
	record := func(token uuid.UUID) error {
		ev, err := app.NewRefundEvent(declined, 9101, uuid.NullUUID{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return store.Record(ctx, app.RefundRecord{Key: app.KeyClaim{Scope: owner.Scope, Token: token},
			Response: app.StoredResponse{StatusCode: 422, Body: []byte(`{"code":"refund-declined"}`)}, Event: ev})
	}
	written := func() (status string, events int64, reserved string) {
		t.Helper()
		var row struct {
			Status string
			Events int64
		}
		if err := db.Raw(`SELECT (SELECT status FROM refund WHERE id = ?) AS status,
			(SELECT count(*) FROM outbox_event WHERE event_type = 'RefundDeclined.v1') AS events`, int64(declined.ID)).Scan(&row).Error; err != nil {
			t.Fatal(err)
		}
		reserved, _ = refundTotal(t, db, p.ID)
		return row.Status, row.Events, reserved
	}

	// Another token: the lock was taken over; nothing is written.
	if err := record(uuid.New()); !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("a stranger's token: %v, want ErrLockLost", err)
	}
	if status, events, reserved := written(); status != "PENDING" || events != 0 || reserved != "30.00" {
		t.Fatalf("after a stranger's record: refund %s, %d events, total %s; want nothing written", status, events, reserved)
	}
	// The owner: everything, once.
	if err := record(owner.Token); err != nil {
		t.Fatal(err)
	}
	if status, events, reserved := written(); status != "DECLINED" || events != 1 || reserved != "0.00" {
		t.Fatalf("after the owner's record: refund %s, %d events, total %s; want DECLINED, 1, 0.00", status, events, reserved)
	}
	// Again: the key is completed, so the token owns nothing any more.
	if err := record(owner.Token); !errors.Is(err, app.ErrLockLost) {
		t.Fatalf("a second record: %v, want ErrLockLost", err)
	}
	if _, events, _ := written(); events != 1 {
		t.Fatalf("%d events after a second record, want 1", events)
	}
}
