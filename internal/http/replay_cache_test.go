package http_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// cutOffDatabase makes the database at dsn refuse every connection and
// ends the ones it has, the service's pool and the test's (s.db) among
// them, until the returned function (also run at the test's end) lets
// them in again.
func (s *testService) cutOffDatabase(t *testing.T, dsn string) (restore func()) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin := func(sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(context.Background(), testdb.AdminDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	name := pgx.Identifier{cfg.Database}.Sanitize()
	admin(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS false`)
	admin(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, cfg.Database)
	restored := false
	restore = func() {
		if !restored {
			restored = true
			admin(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`)
			s.db.Reset() // its connections were ended
		}
	}
	t.Cleanup(restore)
	return restore
}

// A replay the replica's replay cache holds touches no database: with the
// database refusing every connection, a charge's and a refund's replays
// are still their stored answers, byte for byte and with the same
// headers, and a reused key is still 409; a key the cache does not hold
// fails closed, as without the cache.
func TestReplaysFromTheReplayCacheNeedNoDatabase(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	s := startServiceWith(t, dsn, nil, sandboxprovider.Config{})
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	charge := chargeBody(1001, 42, "100.50", "RUB", "pi_1")
	first := s.charge(t, "key-1", charge)
	if first.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", first.status, first.body)
	}
	payment := s.paidPayment(t, 2001, "50.00")
	firstRefund := s.refund(t, payment, "refund-1", refundBody("20.00", "r-1"))
	if firstRefund.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", firstRefund.status, firstRefund.body)
	}
	// Each key's first replay reads its record from the database and
	// leaves it in the cache.
	replays := map[string]response{
		"charge": s.charge(t, "key-1", charge),
		"refund": s.refund(t, payment, "refund-1", refundBody("20.00", "r-1")),
	}
	if hits := s.metric(t, "payment_idempotency_replay_cache_hits_total"); hits != 0 {
		t.Fatalf("cache hits before any replay was kept = %v, want 0", hits)
	}

	restore := s.cutOffDatabase(t, dsn)
	if r := s.charge(t, "key-2", chargeBody(1001, 42, "100.50", "RUB", "pi_2")); r.status != http.StatusServiceUnavailable {
		t.Fatalf("a key the cache does not hold, with the database cut off: %d %s; want 503", r.status, r.body)
	}
	for name, again := range map[string]func() response{
		"charge": func() response { return s.charge(t, "key-1", charge) },
		"refund": func() response { return s.refund(t, payment, "refund-1", refundBody("20.00", "r-1")) },
	} {
		want := map[string]response{"charge": first, "refund": firstRefund}[name]
		for range 2 {
			got := again()
			if got.status != want.status || !bytes.Equal(got.body, want.body) {
				t.Fatalf("%s replay from the cache: %d %s; want %d %s", name, got.status, got.body, want.status, want.body)
			}
			for _, h := range []string{"Content-Type", "Content-Length", "Idempotent-Replayed", "Link"} {
				if got.header.Get(h) != replays[name].header.Get(h) {
					t.Fatalf("%s replay from the cache: %s %q, the database's replay had %q", name, h, got.header.Get(h), replays[name].header.Get(h))
				}
			}
			if got.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s replay from the cache without Idempotent-Replayed: true", name)
			}
		}
	}
	wantProblem(t, s.charge(t, "key-1", chargeBody(1001, 42, "100.51", "RUB", "pi_1")), http.StatusConflict, "idempotency-key-reused")
	if hits := s.metric(t, "payment_idempotency_replay_cache_hits_total"); hits != 5 {
		t.Fatalf("cache hits = %v, want 5 (four replays and the reused key)", hits)
	}
	restore()
	if n := s.count(t, `SELECT count(*) FROM payment`); n != 2 {
		t.Fatalf("payments = %d, want 2", n)
	}
}
