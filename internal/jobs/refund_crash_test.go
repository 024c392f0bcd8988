package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// A refund whose process died mid-way, at the unit level: after phase 1
// (the refund reserved, the provider never asked), or after the provider
// made it and its answer was lost. Either way the refund stays PENDING
// with its amount reserved, and whoever comes next settles it once: the
// client's retry with the same key, or the completer when no retry comes.
// Both ask the provider with the refund's own provider key, so a refund
// the provider already made is found, not made twice.
// (TestCompleterFinishesAnAbandonedRefund has the lost answer settled by
// the completer.)
func TestRefundKilledMidwayIsSettledOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		external domain.ExternalRefundID                                  // drop_: the provider's answer is lost
		killed   func(t *testing.T, ctx context.Context, s refundSetting) // leaves what the dead process left
		resume   func(t *testing.T, ctx context.Context, s refundSetting)
		requests int // the provider's requests under the refund's key
	}{
		{"killed after phase 1, the client retries", "r_killed_retry", killedAfterPhase1, retried, 1},
		{"killed after phase 1, the completer resumes", "r_killed_completer", killedAfterPhase1, completed, 1},
		{"answer lost, the client retries", "drop_lost_retry", answerLost, retried, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newRefundSetting(t, tc.external)
			tc.killed(t, ctx, s)

			if n := count(t, s.db, `SELECT count(*) FROM refund f JOIN payment p ON p.id = f.payment_id
				JOIN idempotency_record r ON r.refund_id = f.id
				WHERE f.status = 'PENDING' AND p.refund_reserved = 40.25 AND r.status = 'IN_PROGRESS'`); n != 1 {
				t.Fatal("after the kill the refund is not PENDING with its amount reserved and its record in progress")
			}
			// The dead process's lock runs out, and the completer's grace.
			exec(t, s.db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes' WHERE command = 'refund'`)
			tc.resume(t, ctx, s)

			if n := count(t, s.db, `SELECT count(*) FROM refund f JOIN payment p ON p.id = f.payment_id
				JOIN idempotency_record r ON r.refund_id = f.id
				WHERE f.status = 'SUCCEEDED' AND p.refund_reserved = 40.25 AND r.status = 'COMPLETED' AND r.http_status = 201`); n != 1 {
				t.Error("the refund is not SUCCEEDED with its record completed and its amount counted once")
			}
			if n := count(t, s.db, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1'`); n != 1 {
				t.Errorf("%d PaymentRefunded.v1 events, want 1", n)
			}
			ledger, err := sandboxprovider.FetchLedger(ctx, s.provider.URL)
			if err != nil {
				t.Fatal(err)
			}
			if got := ledger.SucceededRefunds(string(tc.external)); len(got) != 1 || got[0].Requests != tc.requests || len(ledger.Refunds) != 1 {
				t.Errorf("the provider holds %+v, want one refund, asked %d times under its key", ledger.Refunds, tc.requests)
			}
		})
	}
}

// refundSetting is one replica's refund of 40.25 from a charged payment of
// 100.50, through a sandbox provider over HTTP.
type refundSetting struct {
	db       *pgxpool.Pool
	replica  *replica
	provider *sandboxprovider.Server
	charge   *app.ChargePayment
	refund   *app.RefundPayment
	store    app.RefundStore
	payment  domain.Payment
	cmd      app.RefundCommand
}

func newRefundSetting(t *testing.T, external domain.ExternalRefundID) refundSetting {
	t.Helper()
	dsn := testdb.New(t)
	s := refundSetting{db: pool(t, dsn), provider: startProvider(t)}
	exec(t, s.db, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`)
	s.replica = newReplica(t, dsn, replicaOptions{})
	s.charge = chargeThrough(t, s.replica, s.provider.URL, provider.CallsMetric(prometheus.NewRegistry()))
	client, err := sandbox.New(sandbox.Config{BaseURL: s.provider.URL, ConnectTimeout: time.Second, Timeout: 5 * time.Second, MaxRequestAge: testRequestBound})
	if err != nil {
		t.Fatal(err)
	}
	s.store = s.replica.tx.AutoCommit().Refunds
	core := app.NewCore(s.replica.tx, httpapi.ResponseEncoder{}, 30*time.Second, discardLogger)
	s.refund = app.NewRefundPayment(core, client)

	amount, _ := domain.NewMoney(decimal.RequireFromString("100.50"), "RUB")
	c, err := domain.NewCharge(1001, 42, amount, sandbox.Name, "pi_refunded")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.charge.Handle(context.Background(), app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "charge"}, Charge: c, Operation: app.OperationChargePayment}); err != nil {
		t.Fatal(err)
	}
	s.payment = domain.Payment{ID: domain.PaymentID(count(t, s.db, `SELECT id FROM payment`)), ClientID: "c", Charge: c, Status: domain.PaymentSucceeded}
	s.cmd = app.RefundCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "refund"}, PaymentID: s.payment.ID,
		Amount: decimal.RequireFromString("40.25"), ExternalRefundID: external, Operation: app.OperationRefundPayment}
	return s
}

// killedAfterPhase1: the process committed phase 1 (the key claimed, the
// refund reserved and linked to it) and died before asking the provider.
func killedAfterPhase1(t *testing.T, ctx context.Context, s refundSetting) {
	amount, _ := domain.NewMoney(s.cmd.Amount, "RUB")
	r, err := domain.NewRefund(s.payment, amount, s.cmd.ExternalRefundID)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.store.Claim(ctx, app.KeyClaim{
		Scope: s.cmd.Scope, CommandHash: s.cmd.Hash(), Token: uuid.New(), LockFor: 30 * time.Second}, r)
	if err != nil || !res.Claimed || !res.Reserved {
		t.Fatalf("phase 1: %+v %v", res, err)
	}
}

// answerLost: the provider made the refund and its answer never came back.
func answerLost(t *testing.T, ctx context.Context, s refundSetting) {
	var unknown *app.OutcomeUnknownError
	if _, err := s.refund.Handle(ctx, s.cmd); !errors.As(err, &unknown) {
		t.Fatalf("the lost answer: %v, want OutcomeUnknownError", err)
	}
}

// retried: the client sends the same request with the same key again.
func retried(t *testing.T, ctx context.Context, s refundSetting) {
	res, err := s.refund.Handle(ctx, s.cmd)
	if err != nil || res.Replayed || res.Response.StatusCode != 201 {
		t.Fatalf("the retry: %+v %v, want 201 made by the retry", res, err)
	}
}

// completed: no retry comes; the completer resumes the refund from its
// recovery point.
func completed(t *testing.T, ctx context.Context, s refundSetting) {
	completer := app.NewCompleteAbandonedCharges(repository.NewRetention(s.replica.db),
		map[app.CommandName]app.Resumable{app.CommandCharge: s.charge, app.CommandRefund: s.refund}, time.Minute, 100, discardLogger)
	res, err := completer.Handle(ctx)
	if err != nil || res.Completed != 1 || res.Failed != 0 || res.Released != 0 {
		t.Fatalf("the completer: %+v %v, want the refund completed", res, err)
	}
}
