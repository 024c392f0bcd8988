// Package servicetest runs the real service inside a test, as its users run
// it: service.New and Run on a loopback port, with the configuration read
// through config.Load from an environment, over a database of the test's
// own, charging through a sandbox provider (or a Stripe fake) on another
// loopback port. Tests
// talk to it over real HTTP, look at its database, and count charges in the
// provider's ledger. It stops when the test calls Stop or when the test ends,
// and the provider it started with it.
package servicetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/stripefake"
)

// Options says how to run the service. DSN is required.
type Options struct {
	// DSN is the database (internal/testdb.New gives each test its own).
	DSN string
	// Env is the environment, over BaseEnv: DATABASE_URL, HTTP_ADDR and
	// SANDBOX_PROVIDER_URL are set by Start unless Env sets them.
	Env map[string]string
	// Provider configures the sandbox provider Start runs. With
	// Provider.Webhooks.Secret set and no URL, its events go to this
	// service's POST /webhooks/sandbox, which holds the secret
	// (WEBHOOK_SECRETS, unless Env sets it); in its received mode
	// (Provider.Modifications), SANDBOX_PROVIDER_MODIFICATIONS says so
	// unless Env sets it.
	Provider sandboxprovider.Config
	// Sandbox, if set, is the provider to charge through instead: one that
	// outlives this service, for a test that runs several in turn.
	Sandbox *sandboxprovider.Server
	// Stripe, if set, makes the service charge through a stateful Stripe
	// (internal/stripefake) that Start runs instead of the sandbox:
	// PAYMENT_PROVIDER=stripe, STRIPE_API_BASE at the fake, and the fake's
	// events delivered to the service's POST /webhooks/stripe, signed
	// with STRIPE_WEBHOOK_SECRET, unless NoWebhooks.
	Stripe *StripeOptions
	// Logs receives the service's JSON log; nil discards it.
	Logs io.Writer
	// Service are options of service.New, such as a tracer provider.
	Service []service.Option
}

// StripeOptions configure the Stripe fake Start runs.
type StripeOptions struct {
	// Fake configures it; its keys are Start's.
	Fake stripefake.Config
	// NoWebhooks keeps its events from the service (they are still made,
	// and Stripe.Events lists them).
	NoWebhooks bool
}

// The Stripe fake's keys, as the service is configured with them.
const (
	StripeSecretKey     = "sk_test_servicetest"
	StripeWebhookSecret = "whsec_servicetest_0123456789" //nolint:gosec // G101: the test harness's own secret
)

// BaseEnv is what every test service runs with unless Options.Env says
// otherwise: two API clients, a short shutdown. The shutdown's bound
// outlasts the five to six seconds for which http.Server.Shutdown waits on
// a client connection that has not sent a request yet (a test's HTTP
// client dials ahead during a burst of requests), so such a connection
// delays a test service's stop, never fails it
// (TestTestServiceStopsWithAConnectionThatNeverSentARequest).
var BaseEnv = map[string]string{
	"API_KEYS":                 "demo-client:demo-secret,other-client:other-secret",
	"IDEMPOTENCY_LOCK_TIMEOUT": "30s",
	// The provider's request bound, short so that a resumed refusal
	// settles within a second; the sandbox Start runs has the same one.
	"PROVIDER_MAX_REQUEST_AGE": "1s",
	"SHUTDOWN_TIMEOUT":         "10s",
}

// Service is a running service.
type Service struct {
	// URL is the API's base URL, such as http://127.0.0.1:41234.
	URL string
	// DB is a pool on the service's database, for the test's own reads.
	DB *pgxpool.Pool
	// Provider is the sandbox provider the service charges through; nil
	// with Options.Stripe.
	Provider *sandboxprovider.Server
	// Stripe is the Stripe fake the service charges through, with
	// Options.Stripe.
	Stripe *stripefake.Server
	// Env is the environment the service was configured from.
	Env map[string]string

	wait          func() error // cancels Run, waits for it (once), returns its error
	stoppedByTest bool
}

// stopWithin bounds how long Stop waits for Run to return.
const stopWithin = 15 * time.Second

// Stop cancels Run's context and waits for Run to return; it returns Run's
// error. The test's end stops a service the test did not stop, and fails
// the test if Run returned an error then.
func (s *Service) Stop() error {
	s.stoppedByTest = true
	return s.wait()
}

// LogBuffer is a log destination the service's goroutines and the test can
// share (Options.Logs).
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start runs the service until the test ends; a failure to start or to
// stop cleanly fails the test.
func Start(t testing.TB, o Options) *Service {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL": o.DSN,
		"HTTP_ADDR":    "127.0.0.1:0",
	}
	for k, v := range BaseEnv {
		vars[k] = v
	}
	for k, v := range o.Env {
		vars[k] = v
	}
	ownGroups(vars, o.DSN)
	provider, closeProvider := o.Sandbox, func() {}
	var fake *stripefake.Server
	if o.Stripe != nil {
		cfg := o.Stripe.Fake
		cfg.SecretKey, cfg.WebhookSecret = StripeSecretKey, StripeWebhookSecret
		var err error
		if fake, err = stripefake.Start("127.0.0.1:0", cfg); err != nil {
			t.Fatal(err)
		}
		closeProvider = func() { _ = fake.Close() }
		for k, v := range map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": StripeSecretKey,
			"STRIPE_API_BASE": fake.URL, "STRIPE_WEBHOOK_SECRET": StripeWebhookSecret} {
			if _, set := vars[k]; !set {
				vars[k] = v
			}
		}
	}
	// A provider whose events come to this service starts once the
	// service's address is known; its listener is open from here on.
	var startProvider func(serviceURL string)
	if o.Stripe == nil && provider == nil {
		// The provider keeps the request bound the service relies on.
		if o.Provider.MaxRequestAge == 0 {
			bound, err := time.ParseDuration(vars["PROVIDER_MAX_REQUEST_AGE"])
			if err != nil {
				t.Fatalf("PROVIDER_MAX_REQUEST_AGE: %v", err)
			}
			o.Provider.MaxRequestAge = bound
		}
		if o.Provider.Modifications == sandboxprovider.ModificationsReceived {
			setUnlessSet(vars, "SANDBOX_PROVIDER_MODIFICATIONS", config.ModificationsReceived)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		setUnlessSet(vars, "SANDBOX_PROVIDER_URL", "http://"+ln.Addr().String())
		cfg := o.Provider
		toService := cfg.Webhooks.Secret != "" && cfg.Webhooks.URL == ""
		if toService {
			setUnlessSet(vars, "WEBHOOK_SECRETS", cfg.Webhooks.Secret)
		}
		closeProvider = func() { _ = ln.Close() }
		startProvider = func(serviceURL string) {
			if toService {
				cfg.Webhooks.URL = serviceURL + "/webhooks/sandbox"
			}
			provider = sandboxprovider.Serve(ln, cfg)
			closeProvider = func() { _ = provider.Close() }
		}
		if !toService {
			startProvider("")
		}
	}
	if _, set := vars["SANDBOX_PROVIDER_URL"]; !set && provider != nil {
		vars["SANDBOX_PROVIDER_URL"] = provider.URL
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		closeProvider()
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
		closeProvider()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	if provider == nil && startProvider != nil {
		startProvider("http://" + svc.Addr())
	}
	pool, err := pgxpool.New(context.Background(), o.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var (
		once   sync.Once
		runErr error
	)
	s := &Service{URL: "http://" + svc.Addr(), DB: pool, Provider: provider, Stripe: fake, Env: vars, wait: func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(stopWithin):
				runErr = errors.New("the service did not stop within " + stopWithin.String())
			}
		})
		return runErr
	}}
	if fake != nil && !o.Stripe.NoWebhooks {
		fake.SetWebhookURL(s.URL + "/webhooks/stripe")
	}
	t.Cleanup(func() {
		// A Run error the test asked for (by Stop) is the test's to check.
		if err := s.wait(); err != nil && !s.stoppedByTest {
			t.Errorf("service stopped with error: %v", err)
		}
		pool.Close()
		closeProvider()
	})
	return s
}

// setUnlessSet sets vars[k] to v unless it is set.
func setUnlessSet(vars map[string]string, k, v string) {
	if _, set := vars[k]; !set {
		vars[k] = v
	}
}

// ownGroups names the consumer groups in vars that vars leaves unnamed
// after the database dsn names, when the service has a broker: tests that
// share one broker (make test-kafka) then do not join each other's
// groups, where a member joining or leaving rebalances every member and a
// rebalance delivers again what was not committed yet. The services of
// one test share its database, and so its groups, as a deployment's
// replicas do.
func ownGroups(vars map[string]string, dsn string) {
	db := databaseName(dsn)
	if db == "" || vars["KAFKA_BROKERS"] == "" {
		return
	}
	for k, group := range map[string]string{"ORDER_CONSUMER_GROUP": "order-projection", "PAYMENT_COMMANDS_GROUP": "payment-saga"} {
		if _, set := vars[k]; !set {
			vars[k] = group + "-" + db
		}
	}
}

// databaseName is the database a postgres:// URL names, "" if none.
func databaseName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// Count runs query, a SELECT count(*) ..., on the service's database and
// returns the count; an error fails t.
func (s *Service) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.DB.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
