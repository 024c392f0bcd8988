package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/replaycache"
	"github.com/example/payment-service/internal/testdb"
)

// shiftedClock is the wall clock moved on by what the test adds: the
// purge's and the replay cache's clock, as the elected replica's and this
// one's would be.
type shiftedClock struct {
	mu    sync.Mutex
	shift time.Duration
}

func (c *shiftedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.shift)
}

func (c *shiftedClock) to(shift time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shift = shift
}

// A key replayed late in its life is kept by the replay cache only until
// shortly before the purge may take its record: once the real purge has
// deleted it, the key sent again with another body is a fresh charge, as
// with no cache, not the 409 the cached record would say.
func TestAPurgedKeyIsNeverAnsweredFromTheReplayCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	exec(t, db, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 10, 'RUB'), (1002, 42, 20, 'RUB')`)
	sb := startProvider(t)
	clock := &shiftedClock{}
	const ttl = 24 * time.Hour
	r := newReplica(t, dsn, replicaOptions{now: clock.Now,
		policy: app.RetentionPolicy{IdempotencyTTL: ttl, ProcessedEvents: 7 * 24 * time.Hour, PublishedOutbox: 24 * time.Hour}})
	client, err := sandbox.New(sandbox.Config{BaseURL: sb.URL, ConnectTimeout: time.Second, Timeout: 5 * time.Second, MaxRequestAge: testRequestBound})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core := app.NewCore(r.tx, httpapi.ResponseEncoder{}, 30*time.Second, discardLogger, app.WithReplayCache(replaycache.New(100, reg),
		app.ReplayCachePolicy{Retention: ttl, ClockMargin: 5 * time.Minute, MaxAge: 24 * time.Hour, Now: clock.Now}))
	charge := app.NewChargePayment(core, map[domain.ProviderName]app.ChargeProvider{
		sandbox.Name: provider.Instrument(sandbox.Name, client, provider.CallsMetric(prometheus.NewRegistry())),
	})
	command := func(order domain.OrderID, amount, external string) app.ChargeCommand {
		money, _ := domain.NewMoney(decimal.RequireFromString(amount), "RUB")
		c, err := domain.NewCharge(order, 42, money, sandbox.Name, domain.ExternalPaymentID(external))
		if err != nil {
			t.Fatal(err)
		}
		return app.ChargeCommand{Scope: app.IdempotencyScope{ClientID: "c", Key: "k"}, Charge: c, Operation: app.OperationChargePayment}
	}
	first, another := command(1001, "10", "pi_first"), command(1002, "20", "pi_second")

	res, err := charge.Handle(ctx, first)
	if err != nil || res.Replayed || res.Response.StatusCode != 201 {
		t.Fatalf("the charge = %+v, %v", res, err)
	}
	// Ten minutes before the record's purge may come, its replay is read
	// from the database and kept; the next replay and the reused key are
	// answered from the cache.
	clock.to(ttl - 10*time.Minute)
	for i := range 2 {
		if replay, err := charge.Handle(ctx, first); err != nil || !replay.Replayed || string(replay.Response.Body) != string(res.Response.Body) {
			t.Fatalf("replay %d = %+v, %v", i, replay, err)
		}
	}
	if _, err := charge.Handle(ctx, another); !errors.Is(err, app.ErrKeyReused) {
		t.Fatalf("the key reused within its TTL = %v, want ErrKeyReused", err)
	}
	if hits := gatheredCounter(t, reg, "payment_idempotency_replay_cache_hits_total"); hits != 2 {
		t.Fatalf("cache hits = %v, want 2 (the second replay and the reused key)", hits)
	}

	// A minute past the TTL the purge, run by the jobs, deletes the record.
	clock.to(ttl + time.Minute)
	if err := r.jobs.PurgeExpired(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k'`); n != 0 {
		t.Fatalf("%d records of the key after the purge, want 0", n)
	}
	fresh, err := charge.Handle(ctx, another)
	if err != nil || fresh.Replayed || fresh.Response.StatusCode != 201 || string(fresh.Response.Body) == string(res.Response.Body) {
		t.Fatalf("the purged key sent again with another body = %+v (%s), %v; want a fresh charge", fresh, fresh.Response.Body, err)
	}
	if n := count(t, db, `SELECT count(*) FROM payment WHERE order_id = 1002 AND status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("%d succeeded payments of order 1002, want 1: the fresh charge", n)
	}
}

// gatheredCounter is the value of the counter name in reg.
func gatheredCounter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
