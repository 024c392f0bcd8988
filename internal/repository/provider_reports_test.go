package repository_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// What an event about a payment or a refund finds, one case per branch of
// reportedChargeSQL and reportedRefundSQL: the object by its provider key
// with its claim while that is IN_PROGRESS, without one once the key is
// completed, and nothing for a key of no object.
func TestProviderReportsFindTheObjectAndItsClaim(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	saga := uuid.New()
	exec := func(q string, args ...any) {
		t.Helper()
		if err := db.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency, saga_id) VALUES (1, 42, 10, 'EUR', ?)`, saga)
	pending := addPayment(t, db, "demo-client", 1, "10.00", "EUR", domain.PaymentPending)
	settled := addPayment(t, db, "demo-client", 2, "20.00", "EUR", domain.PaymentSucceeded)
	byPrevious := addPayment(t, db, "demo-client", 3, "30.00", "EUR", domain.PaymentPending)
	token, previousToken := uuid.New(), uuid.New()
	exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, payment_id)
		VALUES ('demo-client', 'k-pending', 'charge', 'h1', 'IN_PROGRESS', ?, now() + interval '1 minute', ?, ?)`, token, int64(pending.ID), int64(pending.ID))
	// The previous release's claim names its payment in payment_id alone
	// (migration 00024).
	exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, payment_id)
		VALUES ('demo-client', 'k-previous', 'charge', 'h4', 'IN_PROGRESS', ?, now() + interval '1 minute', ?)`, previousToken, int64(byPrevious.ID))
	exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, recovery_point, payment_id)
		VALUES ('demo-client', 'k-settled', 'charge', 'h2', 'COMPLETED', '{}', 201, ?, ?)`, int64(settled.ID), int64(settled.ID))
	exec(`INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		VALUES (?, 'demo-client', 'sandbox', 're_1', 5, 'EUR', 'PENDING')`, int64(settled.ID))
	refundToken := uuid.New()
	// A refund's record names its payment too, and its recovery point is
	// an id of another table, which may be a payment's id as well: the
	// settled charge's event, or the pending one's, must not take the
	// refund's claim for its own.
	exec(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, refund_id, payment_id)
		SELECT 'demo-client', 'k-refund', 'refund', 'h3', 'IN_PROGRESS', ?, now(), id, id, payment_id FROM refund WHERE external_refund_id = 're_1'`, refundToken)

	err := tx.Transact(ctx, func(ctx context.Context, r app.Repos) error {
		charges := []struct {
			external domain.ExternalPaymentID
			found    bool
			status   domain.PaymentStatus
			claim    *app.IdempotencyRecord
		}{
			{"pi_1", true, domain.PaymentPending, &app.IdempotencyRecord{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "k-pending"}, CommandHash: "h1", Status: app.RecordInProgress, LockToken: token}},
			{"pi_2", true, domain.PaymentSucceeded, nil},
			{"pi_3", true, domain.PaymentPending, &app.IdempotencyRecord{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "k-previous"}, CommandHash: "h4", Status: app.RecordInProgress, LockToken: previousToken}},
			{"pi_nobody", false, "", nil},
		}
		for _, tc := range charges {
			rep, found, err := r.ProviderReports.Charge(ctx, "sandbox", tc.external)
			if err != nil || found != tc.found {
				t.Fatalf("%s: found %v, %v; want %v", tc.external, found, err, tc.found)
			}
			if found && (rep.Payment.Status != tc.status || string(rep.Payment.Charge.ExternalPaymentID) != string(tc.external)) {
				t.Errorf("%s: %+v, want status %s", tc.external, rep.Payment, tc.status)
			}
			if (rep.Claim == nil) != (tc.claim == nil) || (tc.claim != nil && (rep.Claim.Scope != tc.claim.Scope ||
				rep.Claim.CommandHash != tc.claim.CommandHash || rep.Claim.Status != tc.claim.Status || rep.Claim.LockToken != tc.claim.LockToken)) {
				t.Errorf("%s: claim %+v, want %+v", tc.external, rep.Claim, tc.claim)
			}
		}
		if rep, _, _ := r.ProviderReports.Charge(ctx, "sandbox", "pi_1"); rep.Saga.UUID != saga {
			t.Errorf("saga %v, want the order's %v", rep.Saga, saga)
		}

		rep, found, err := r.ProviderReports.Refund(ctx, "sandbox", "re_1")
		if err != nil || !found || rep.Refund.Status != domain.RefundPending || rep.Payment.ID != settled.ID ||
			rep.Claim == nil || rep.Claim.LockToken != refundToken || rep.Claim.Scope.Key != "k-refund" {
			t.Fatalf("refund re_1: %+v, %v, %v; want PENDING with its payment and its claim", rep, found, err)
		}
		if _, found, err := r.ProviderReports.Refund(ctx, "sandbox", "re_nobody"); found || err != nil {
			t.Fatalf("refund re_nobody: found %v, %v", found, err)
		}

		// A contradiction is kept once per consumer and event, byte for byte.
		c := app.Contradiction{Consumer: "webhook:sandbox", RecordedStatus: domain.PaymentSucceeded, Reason: "declined",
			Event: app.ProviderEvent{ID: "evt_1", Type: "charge.declined", ProviderKey: "sandbox:pi_2", Raw: []byte(`{"id": "evt_1" }`)}}
		for range 2 {
			if err := r.ProviderReports.KeepContradiction(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	if err := db.Raw(`SELECT event::text FROM provider_event_contradiction`).Scan(&kept).Error; err != nil {
		t.Fatal(err)
	}
	if len(kept) != 1 || kept[0] != `{"id": "evt_1" }` {
		t.Fatalf("contradictions kept: %q, want the one event byte for byte", kept)
	}
}
