package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// statementLog records the first word of every statement and transaction
// command the pool sends: one entry per round trip.
type statementLog struct {
	mu    sync.Mutex
	words []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	word := strings.Fields(data.SQL)[0]
	if word == "--" || strings.HasPrefix(word, "--") {
		word = "statement"
	}
	l.mu.Lock()
	l.words = append(l.words, strings.ToUpper(word))
	l.mu.Unlock()
	return ctx
}

func (*statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// openLogged is a new migrated database on a pool of maxConns, whose
// statements log records, closed when t ends, and a logger that discards.
func openLogged(t *testing.T, maxConns int) (*gorm.DB, *statementLog, *slog.Logger) {
	t.Helper()
	log := &statementLog{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := repository.Open(testdb.New(t), repository.PoolConfig{MaxOpenConns: maxConns}, logger, repository.WithQueryTracer(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return db, log, logger
}

// take returns what was recorded since the last take.
func (l *statementLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	words := l.words
	l.words = nil
	return words
}

// approvingProvider approves every charge and refund at once.
type approvingProvider struct{}

func (approvingProvider) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: time.Second}
}

func (approvingProvider) Charge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return app.ProviderApproved, nil
}
func (approvingProvider) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return app.ProviderApproved, nil
}
func (approvingProvider) Refund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return app.ProviderApproved, nil
}
func (approvingProvider) LookupRefund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return app.ProviderApproved, nil
}

// The round trips of a refund on its usual path (a new key, refunded at
// once), beside a charge's. A charge's phase 1 statement reads its key
// (KeyReadingSteps): phase 1 and phase 3, and for a replay or a reused
// key phase 1 alone, which writes nothing. A refund: the key's read, the
// refund's read of its payment, phase 1 and phase 3, each one statement.
func TestRefundRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, log, logger := openLogged(t, 2)
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100, 'RUB')`).Error; err != nil {
		t.Fatal(err)
	}
	core := app.NewCore(repository.NewTransactor(db), httpapi.ResponseEncoder{}, 30*time.Second, logger)
	charge := app.NewChargePayment(core, map[domain.ProviderName]app.ChargeProvider{"sandbox": approvingProvider{}})
	refund := app.NewRefundPayment(core, approvingProvider{})

	money, _ := domain.NewMoney(decimal.RequireFromString("100"), "RUB")
	c, err := domain.NewCharge(1001, 42, money, "sandbox", "pi_trips")
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	if res, err := charge.Handle(ctx, app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "charge"}, Charge: c, Operation: app.OperationChargePayment}); err != nil || res.Response.StatusCode != 201 {
		t.Fatalf("charge: %+v %v", res, err)
	}
	chargeTrips := log.take()
	var payment int64
	if err := db.Raw(`SELECT id FROM payment`).Scan(&payment).Error; err != nil {
		t.Fatal(err)
	}
	log.take()
	if res, err := refund.Handle(ctx, app.RefundCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "refund"}, PaymentID: domain.PaymentID(payment),
		Amount: decimal.RequireFromString("10"), ExternalRefundID: "re_trips", Operation: app.OperationRefundPayment}); err != nil || res.Response.StatusCode != 201 {
		t.Fatalf("refund: %+v %v", res, err)
	}
	refundTrips := log.take()
	t.Logf("a charge: %d round trips %v; a refund: %d %v", len(chargeTrips), chargeTrips, len(refundTrips), refundTrips)
	if len(chargeTrips) != 2 {
		t.Errorf("a charge took %d round trips %v, want 2: phase 1, phase 3", len(chargeTrips), chargeTrips)
	}
	// A write or a row lock of the key's record gives it another ctid or
	// xmax; the payment table another row.
	recordVersion := func() string {
		var v string
		if err := db.Raw(`SELECT ctid::text || ' ' || xmax::text || ' ' || (SELECT count(*) FROM payment) FROM idempotency_record WHERE idempotency_key = 'charge'`).Scan(&v).Error; err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := recordVersion()
	other, err := domain.NewCharge(1001, 42, money, "sandbox", "pi_other")
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range []struct {
		name   string
		charge domain.Charge
		status int
		err    error
	}{
		{"a replay", c, 201, nil},
		{"a reused key", other, 0, app.ErrKeyReused},
	} {
		log.take()
		res, err := charge.Handle(ctx, app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "charge"}, Charge: again.charge, Operation: app.OperationChargePayment})
		if !errors.Is(err, again.err) || res.Response.StatusCode != again.status {
			t.Fatalf("%s: %+v %v, want %d %v", again.name, res, err, again.status, again.err)
		}
		if trips := log.take(); len(trips) != 1 {
			t.Errorf("%s took %d round trips %v, want 1: phase 1, answered from the key it read", again.name, len(trips), trips)
		}
	}
	if after := recordVersion(); after != before {
		t.Errorf("the key's record and the payments (ctid, xmax, payments) went from %q to %q: the replay and the reused key wrote or locked something", before, after)
	}
	if len(refundTrips) != 4 {
		t.Errorf("a refund took %d round trips %v, want 4: the key's read, the payment's, phase 1, phase 3", len(refundTrips), refundTrips)
	}
}
