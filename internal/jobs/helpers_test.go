package jobs_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/jobs"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// replica is one service instance's view of the database: its own pool,
// its own jobs and metrics.
type replica struct {
	db       *gorm.DB
	tx       *repository.Transactor
	registry *prometheus.Registry
	jobs     *jobs.Jobs
}

type replicaOptions struct {
	policy    app.RetentionPolicy
	batchSize int
	now       func() time.Time
	charge    *app.ChargePayment // nil: the completer is not exercised
}

var defaultPolicy = app.RetentionPolicy{IdempotencyTTL: 72 * time.Hour, ProcessedEvents: 7 * 24 * time.Hour, PublishedOutbox: 24 * time.Hour}

func newReplica(t testing.TB, dsn string, o replicaOptions) *replica {
	t.Helper()
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 10}, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	if o.batchSize == 0 {
		o.batchSize = 5000
	}
	if o.policy == (app.RetentionPolicy{}) {
		o.policy = defaultPolicy
	}
	tx := repository.NewTransactor(db)
	retention := repository.NewRetention(db)
	registry := prometheus.NewRegistry()
	return &replica{
		db:       db,
		tx:       tx,
		registry: registry,
		jobs: jobs.New(jobs.Deps{
			// Paced as the service wires it; at a rate that keeps the
			// tests' pauses to microseconds.
			Purge:    app.NewPurgeExpired(jobs.Paced(retention, 1_000_000), o.policy, o.batchSize),
			Complete: app.NewCompleteAbandonedCharges(retention, map[app.CommandName]app.Resumable{app.CommandCharge: o.charge}, time.Minute, 100, discardLogger),
			Logger:   discardLogger,
			Registry: registry,
			Now:      o.now,
		}),
	}
}

// counter reads one sample of a counter from the replica's registry.
func (r *replica) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := r.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func pool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func exec(t testing.TB, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t testing.TB, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// startProvider runs a sandbox provider on a loopback port.
func startProvider(t testing.TB) *sandboxprovider.Server {
	t.Helper()
	s, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testRequestBound is the request bound the tests' sandbox clients
// declare: short, so a resumed refusal's wait for earlier requests costs
// little, and long enough that a request on loopback always lands within
// it.
const testRequestBound = 200 * time.Millisecond

// chargeThrough is ChargePayment on r's database, charging through the
// sandbox provider at url over HTTP, each call counted in calls.
func chargeThrough(t testing.TB, r *replica, url string, calls *prometheus.CounterVec) *app.ChargePayment {
	t.Helper()
	client, err := sandbox.New(sandbox.Config{BaseURL: url, ConnectTimeout: time.Second, Timeout: 5 * time.Second, MaxRequestAge: testRequestBound})
	if err != nil {
		t.Fatal(err)
	}
	return chargeWith(r, provider.Instrument(sandbox.Name, client, calls))
}

// chargeWith builds the charge use case of replica r on the sandbox
// provider p.
func chargeWith(r *replica, p app.ChargeProvider) *app.ChargePayment {
	return app.NewChargePayment(app.NewCore(r.tx, httpapi.ResponseEncoder{}, 30*time.Second, discardLogger),
		map[domain.ProviderName]app.ChargeProvider{sandbox.Name: p})
}

// counterOf reads the provider calls counter for one outcome.
func (r *replica) counterOf(t testing.TB, c *prometheus.CounterVec, outcome string) float64 {
	t.Helper()
	return testutil.ToFloat64(c.WithLabelValues(string(sandbox.Name), outcome))
}
