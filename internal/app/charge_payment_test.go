package app_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// gatedProvider answers the first call with "not charged", but only when
// the test lets it; later calls are approved at once.
type gatedProvider struct {
	mu      sync.Mutex
	calls   int
	called  chan struct{} // closed when the first call has arrived
	release chan struct{} // the first call returns when this is closed
}

func (p *gatedProvider) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: time.Second}
}

func (p *gatedProvider) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	p.mu.Lock()
	p.calls++
	first := p.calls == 1
	p.mu.Unlock()
	if !first {
		return app.ProviderApproved, nil
	}
	close(p.called)
	<-p.release
	return "", app.ErrProviderNotCharged
}

// LookupCharge is not part of this test's story: its payments are never
// resumed after a refusal. It says it cannot tell.
func (p *gatedProvider) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return "", app.ErrProviderOutcomeUnknown
}

// A request whose lock ran out during its provider call, and whose key was
// taken over meanwhile, gets "not charged" for its own call. Releasing the
// key then loses the fence: the new owner holds it and has resumed the
// payment. The old request must not say "nothing was recorded for this
// key" (it would be false: the key is charged by the new owner; found by
// the model checker, docs/model.md, property P6): it answers what the key
// holds, the new owner's 201.
func TestReleaseThatLosesTheFenceAnswersWhatTheKeyHolds(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 8}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 10, 'RUB')`); err != nil {
		t.Fatal(err)
	}
	provider := &gatedProvider{called: make(chan struct{}), release: make(chan struct{})}
	uc := app.NewChargePayment(app.NewCore(repository.NewTransactor(db), httpapi.ResponseEncoder{}, 30*time.Second, logger),
		map[domain.ProviderName]app.ChargeProvider{"sandbox": provider})
	money, err := domain.NewMoney(decimal.RequireFromString("10"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(1001, 42, money, "sandbox", "pi_1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "k"}, Charge: charge, Operation: app.OperationChargePayment}

	var first app.CommandResult
	var firstErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, firstErr = uc.Handle(context.Background(), cmd)
	}()
	<-provider.called
	// The first request's lock runs out while its call is in flight, and
	// the client's retry takes the key over and finishes the charge.
	if _, err := pool.Exec(context.Background(), `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	second, err := uc.Handle(context.Background(), cmd)
	if err != nil || second.Response.StatusCode != 201 {
		t.Fatalf("the retry that took over: %+v %v, want 201", second, err)
	}
	close(provider.release)
	<-done

	if firstErr != nil || first.Response.StatusCode != 201 || string(first.Response.Body) != string(second.Response.Body) {
		t.Fatalf("the old owner answered %d %s, %v; want the new owner's stored 201, never provider-unavailable (nothing was recorded)",
			first.Response.StatusCode, first.Response.Body, firstErr)
	}
	var status, payment string
	if err := pool.QueryRow(context.Background(), `SELECT r.status, p.status FROM idempotency_record r JOIN payment p ON p.id = r.payment_id`).Scan(&status, &payment); err != nil {
		t.Fatal(err)
	}
	if status != "COMPLETED" || payment != "SUCCEEDED" {
		t.Fatalf("record %s, payment %s; want the new owner's COMPLETED and SUCCEEDED untouched", status, payment)
	}
}
