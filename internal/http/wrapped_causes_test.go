package http

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// A charge's error carries its class (the problem the client gets) and,
// under it, what went wrong: a refused connection, a timeout, a context's
// deadline. Each error here is the real one of a real failure
// (PostgreSQL, the sandbox provider, loopback); errors.Is and errors.As
// find its cause, and problemFor answers what it answered before the
// cause was in the chain.
func TestAChargeErrorKeepsItsCauseAndItsProblem(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dsn := testdb.New(t)
	db := openForCauses(t, dsn, logger)
	if err := db.Exec(`INSERT INTO order_projection (order_id, customer_id, amount, currency) SELECT g, 42, 100.50, 'RUB' FROM generate_series(1001, 1010) AS g`).Error; err != nil {
		t.Fatal(err)
	}
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{SlowDelay: 3 * time.Second})
	reachable := sandboxClient(t, provider.URL)
	refused := sandboxClient(t, "http://127.0.0.1:1") // nothing listens: refused at once
	down := openForCauses(t, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", logger)

	// charge runs a charge whose claim may take lock (the core's lock
	// timeout) at most.
	charge := func(lock time.Duration, db *gorm.DB, p app.ChargeProvider, order int64, external string) error {
		core := app.NewCore(repository.NewTransactor(db), ResponseEncoder{}, lock, logger)
		uc := app.NewChargePayment(core, map[domain.ProviderName]app.ChargeProvider{sandbox.Name: p})
		_, err := uc.Handle(t.Context(), app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: external},
			Charge: newCharge(t, order, external), Operation: chargeOperation})
		return err
	}
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	timedOut := func(err error) bool {
		var netErr net.Error
		return errors.As(err, &netErr) && netErr.Timeout()
	}

	tests := []struct {
		name   string
		charge func() error
		status int
		code   string
		class  error // the class's error, which problemFor goes by
		cause  func(error) bool
	}{
		{"the provider refuses the connection: it did not act",
			func() error { return charge(time.Minute, db, refused, 1001, "pi_refused") },
			http.StatusServiceUnavailable, codeProviderUnavailable, app.ErrProviderUnavailable, is(syscall.ECONNREFUSED)},
		{"the provider's answer does not come within its timeout",
			func() error { return charge(time.Minute, db, reachable, 1002, "slow_answer") },
			http.StatusServiceUnavailable, codeOutcomeUnknown, app.ErrProviderOutcomeUnknown, timedOut},
		{"the database refuses the connection",
			func() error { return charge(time.Minute, down, reachable, 1003, "pi_db_down") },
			http.StatusServiceUnavailable, codeServiceUnavailable, app.ErrStoreUnavailable, is(syscall.ECONNREFUSED)},
		{"the claim's statement waits for a lock beyond the claim's time",
			func() error {
				return testdb.WhileLocked(t, dsn, "order_projection", func() error { return charge(time.Second, db, reachable, 1004, "pi_locked_out") })
			},
			http.StatusServiceUnavailable, codeServiceUnavailable, app.ErrStoreUnavailable, is(context.DeadlineExceeded)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.charge()
			if !errors.Is(err, tc.class) {
				t.Fatalf("%v, want %v", err, tc.class)
			}
			if !tc.cause(err) {
				t.Errorf("%v: its cause is not in the chain", err)
			}
			if p := problemFor(err); p.Status != tc.status || p.Code != tc.code {
				t.Errorf("%v: problem %d %s, want %d %s", err, p.Status, p.Code, tc.status, tc.code)
			}
		})
	}
}

func openForCauses(t *testing.T, dsn string, logger *slog.Logger) *gorm.DB {
	t.Helper()
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	return db
}

func sandboxClient(t *testing.T, baseURL string) *sandbox.Client {
	t.Helper()
	c, err := sandbox.New(sandbox.Config{BaseURL: baseURL, ConnectTimeout: time.Second, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newCharge is order's charge of 100.50 RUB by customer 42 on the sandbox.
func newCharge(t *testing.T, order int64, external string) domain.Charge {
	t.Helper()
	m, err := domain.NewMoney(decimal.RequireFromString("100.50"), "RUB")
	if err != nil {
		t.Fatal(err)
	}
	c, err := domain.NewCharge(domain.OrderID(order), 42, m, sandbox.Name, domain.ExternalPaymentID(external))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
