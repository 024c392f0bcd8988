package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// A refund whose provider answer was lost, and whose client never comes
// back: the completer rebuilds the command from the refund row (its
// recovery point, refund_id), takes the expired claim over and records
// what the provider made, once.
func TestCompleterFinishesAnAbandonedRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	exec(t, db, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`)
	sb := startProvider(t)
	r := newReplica(t, dsn, replicaOptions{})
	charge := chargeThrough(t, r, sb.URL, provider.CallsMetric(prometheus.NewRegistry()))
	client, err := sandbox.New(sandbox.Config{BaseURL: sb.URL, ConnectTimeout: time.Second, Timeout: 5 * time.Second, MaxRequestAge: testRequestBound})
	if err != nil {
		t.Fatal(err)
	}
	core := app.NewCore(r.tx, httpapi.ResponseEncoder{}, 30*time.Second, discardLogger)
	refund := app.NewRefundPayment(core, client)

	amount, _ := domain.NewMoney(decimal.RequireFromString("100.50"), "RUB")
	c, err := domain.NewCharge(1001, 42, amount, sandbox.Name, "pi_refunded")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := charge.Handle(ctx, app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "charge"}, Charge: c, Operation: app.OperationChargePayment}); err != nil {
		t.Fatal(err)
	}
	payment := domain.PaymentID(count(t, db, `SELECT id FROM payment`))
	cmd := app.RefundCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "refund"}, PaymentID: payment,
		Amount: decimal.RequireFromString("40.25"), ExternalRefundID: "drop_abandoned", Operation: app.OperationRefundPayment}
	var unknown *app.OutcomeUnknownError
	if _, err := refund.Handle(ctx, cmd); !errors.As(err, &unknown) {
		t.Fatalf("the lost answer: %v, want OutcomeUnknownError", err)
	}
	// The client does not come back within the completer's grace.
	exec(t, db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes' WHERE command = 'refund'`)

	completer := app.NewCompleteAbandonedCharges(repository.NewRetention(r.db),
		map[app.CommandName]app.Resumable{app.CommandCharge: charge, app.CommandRefund: refund}, time.Minute, 100, discardLogger)
	res, err := completer.Handle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 1 || res.Failed != 0 || res.Released != 0 {
		t.Fatalf("result = %+v, want the refund completed", res)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_record r JOIN refund f ON f.id = r.refund_id
		WHERE r.command = 'refund' AND r.status = 'COMPLETED' AND r.http_status = 201 AND f.status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("the refund's record is not completed with a SUCCEEDED refund")
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1'`); n != 1 {
		t.Errorf("%d PaymentRefunded.v1 events, want 1", n)
	}
	ledger, err := sandboxprovider.FetchLedger(ctx, sb.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := ledger.SucceededRefunds("drop_abandoned"); len(got) != 1 || got[0].Requests != 2 {
		t.Errorf("the provider holds %+v, want one refund, asked twice", got)
	}
	// The client's late retry replays the outcome.
	late, err := refund.Handle(ctx, cmd)
	if err != nil || !late.Replayed || late.Response.StatusCode != 201 {
		t.Errorf("the late retry: %+v %v, want the stored 201 replayed", late, err)
	}
}

// alwaysNothingReserved is a command whose Resume finds nothing to resume.
type alwaysNothingReserved struct{}

func (alwaysNothingReserved) Resume(context.Context, app.IdempotencyRecord) error {
	return app.ErrNothingReserved
}

// A refund record with a refund as its recovery point is never released by
// the completer, whatever its command's Resume says: its refund may have
// reached the provider. The purge leaves it alone as well.
func TestCompleterNeverReleasesARecordWithARefund(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	r := newReplica(t, dsn, replicaOptions{})
	exec(t, db, `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, refund_reserved)
		VALUES ('c', 1, 1, 'sandbox', 'pi_1', 10, 'RUB', 'SUCCEEDED', 5)`)
	exec(t, db, `INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		SELECT id, 'c', 'sandbox', 're_1', 5, 'RUB', 'PENDING' FROM payment`)
	exec(t, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, recovery_point, refund_id, payment_id, lock_token, locked_until, created_at)
		SELECT 'c', 'refund-in-flight', 'refund', 'h', 'IN_PROGRESS', id, id, payment_id, gen_random_uuid(), now() - interval '2 minutes', now() - interval '100 hours' FROM refund`)

	completer := app.NewCompleteAbandonedCharges(repository.NewRetention(r.db),
		map[app.CommandName]app.Resumable{app.CommandRefund: alwaysNothingReserved{}}, time.Minute, 100, discardLogger)
	res, err := completer.Handle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Released != 0 {
		t.Errorf("result = %+v: a record with a refund was released", res)
	}
	if err := r.jobs.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'refund-in-flight'`); n != 1 {
		t.Errorf("the refund's record is gone")
	}
}
