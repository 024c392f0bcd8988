// Package servicetest runs the real service inside a test, as its users run
// it: service.New and Run on a loopback port, with the configuration read
// through config.Load from an environment, over a database of the test's
// own, charging through a sandbox provider on another loopback port. Tests
// talk to it over real HTTP, look at its database, and count charges in the
// provider's ledger. It stops, and the provider with it, when the test ends.
package servicetest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
)

// Options says how to run the service. DSN is required.
type Options struct {
	// DSN is the database (internal/testdb.New gives each test its own).
	DSN string
	// Env is the environment, over BaseEnv: DATABASE_URL, HTTP_ADDR and
	// SANDBOX_PROVIDER_URL are set by Start unless Env sets them.
	Env map[string]string
	// Provider configures the sandbox provider Start runs.
	Provider sandboxprovider.Config
	// Logs receives the service's JSON log; nil discards it.
	Logs io.Writer
	// Service are options of service.New, such as a tracer provider.
	Service []service.Option
}

// BaseEnv is what every test service runs with unless Options.Env says
// otherwise: two API clients, a short shutdown.
var BaseEnv = map[string]string{
	"API_KEYS":                 "demo-client:demo-secret,other-client:other-secret",
	"IDEMPOTENCY_LOCK_TIMEOUT": "30s",
	"SHUTDOWN_TIMEOUT":         "5s",
}

// Service is a running service.
type Service struct {
	// URL is the API's base URL, such as http://127.0.0.1:41234.
	URL string
	// DB is a pool on the service's database, for the test's own reads.
	DB *pgxpool.Pool
	// Provider is the sandbox provider the service charges through.
	Provider *sandboxprovider.Server
}

// Start runs the service until the test ends; a failure to start or to
// stop cleanly fails the test.
func Start(t testing.TB, o Options) *Service {
	t.Helper()
	provider, err := sandboxprovider.Start("127.0.0.1:0", o.Provider)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"DATABASE_URL":         o.DSN,
		"HTTP_ADDR":            "127.0.0.1:0",
		"SANDBOX_PROVIDER_URL": provider.URL,
	}
	for k, v := range BaseEnv {
		vars[k] = v
	}
	for k, v := range o.Env {
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		_ = provider.Close()
		t.Fatal(err)
	}
	logs := o.Logs
	if logs == nil {
		logs = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := service.New(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)), o.Service...)
	if err != nil {
		cancel()
		_ = provider.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	pool, err := pgxpool.New(context.Background(), o.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("service stopped with error: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("service did not stop within 15s")
		}
		pool.Close()
		_ = provider.Close()
	})
	return &Service{URL: "http://" + svc.Addr(), DB: pool, Provider: provider}
}
