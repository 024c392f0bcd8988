package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// A saga step that asks to be tried again (app.ErrSagaRetry) keeps what
// went wrong under it, for errors.Is; the saga consumer tries it again
// without limit, whatever that cause is, even a rejection of the data,
// which alone would count towards the command's MaxAttempts and then
// dead-letter it. The first errors are the real ones of real steps on
// PostgreSQL with the sandbox provider's client.
func TestASagaStepThatAsksAgainIsTriedAgainWhateverItsCause(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dsn := testdb.New(t)
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (3001, 42, 100, 'RUB'), (3002, 42, 100, 'RUB')`).Error; err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: the provider's connection is refused.
	refused, err := sandbox.New(sandbox.Config{BaseURL: "http://127.0.0.1:1", ConnectTimeout: time.Second, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// step charges order with a core whose claims take lock at most.
	step := func(lock time.Duration, order int64) error {
		core := app.NewCore(repository.NewTransactor(db), httpapi.ResponseEncoder{}, lock, logger, app.WithSagaReplies(SagaReplies{}))
		charges := app.NewChargePayment(core, map[domain.ProviderName]app.ChargeProvider{sandbox.Name: refused})
		steps := app.NewSagaSteps(charges, nil, nil, SagaReplies{}, "saga", time.Hour, "saga-commands", logger)
		_, err := steps.Charge(t.Context(), sagaCharge(t, order), time.Now())
		return err
	}
	rejection := fmt.Errorf("%w: %w", app.ErrDataRejected, &pgconn.PgError{Code: "23514"})

	tests := []struct {
		name     string
		err      func() error
		cause    error
		rejected bool // counted towards MaxAttempts
	}{
		{"the order is not projected yet", func() error { return step(time.Minute, 3999) },
			domain.ErrOrderNotFound, false},
		{"the provider refuses the connection", func() error { return step(time.Minute, 3001) },
			syscall.ECONNREFUSED, false},
		{"the claim waits for a lock beyond its time",
			func() error {
				return testdb.WhileLocked(t, dsn, "order_projection", func() error { return step(time.Second, 3002) })
			},
			context.DeadlineExceeded, false},
		{"the database rejects the data", func() error { return rejection },
			app.ErrDataRejected, true},
		{"the step asks again over a rejection of the data",
			func() error { return fmt.Errorf("%w: %w", app.ErrSagaRetry, rejection) },
			app.ErrDataRejected, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if !errors.Is(err, tc.cause) {
				t.Errorf("%v: %v is not in the chain", err, tc.cause)
			}
			if !tc.rejected && !errors.Is(err, app.ErrSagaRetry) {
				t.Errorf("%v, want ErrSagaRetry", err)
			}
			if got := sagaRejected(err); got != tc.rejected {
				t.Errorf("%v: counted towards MaxAttempts %v, want %v", err, got, tc.rejected)
			}
		})
	}
}

// sagaCharge is a new saga's charge step for order: 100 RUB by customer 42.
func sagaCharge(t *testing.T, order int64) app.SagaCharge {
	t.Helper()
	step, err := app.NewSagaStep(uuid.New(), "charge-payment")
	if err != nil {
		t.Fatal(err)
	}
	money, err := domain.NewMoney(decimal.RequireFromString("100"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(domain.OrderID(order), 42, money, sandbox.Name, domain.ExternalPaymentID(fmt.Sprintf("pi_saga_%d", order)))
	if err != nil {
		t.Fatal(err)
	}
	return app.SagaCharge{EventID: uuid.New(), Step: step, Charge: c}
}
