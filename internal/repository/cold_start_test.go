package repository_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// The cold start (decision 0017): on a database whose empty
// tables were analyzed, a connection's first charges run while payment and
// idempotency_record hold a few rows, and the plans PostgreSQL makes then
// scan those tables in full. Cached as the generic plan after five
// executions, such a plan went on scanning them while they grew, until an
// ANALYZE. The service's connections (repository.Open) keep to the
// indexes, so after the tables have grown, with no ANALYZE in between, a
// charge reads a handful of rows of each, its foreign key check included:
// no sequential scan, and no scan of a whole index either.
func TestChargesOnAnAnalyzedColdStartDoNotScanTheGrownTables(t *testing.T) {
	t.Parallel()
	store, db := grownAfterAnAnalyzedColdStart(t, "")
	before := tableReads(t, db)
	chargeOnce(t, store, 25000)
	after := tableReads(t, db)
	for _, table := range []string{"payment", "idempotency_record"} {
		scans, rows := after[table].scans-before[table].scans, after[table].rows-before[table].rows
		// A scan of either table reads 20,000 rows; the charge's own
		// lookups read a few.
		if scans != 0 || rows > 100 {
			t.Errorf("a charge after %s grew to 20,000 rows: %d sequential scans, %d rows read; want none, and a few rows by its indexes",
				table, scans, rows)
		}
	}
}

// BenchmarkChargeAfterAnAnalyzedColdStart is a charge's three statements
// on one pooled connection, after ten charges on an analyzed, empty
// database and the tables' growth to 20,000 rows with no ANALYZE: what each
// charge of a cold start's first minute costs once the tables have grown
// (docs/benchmarks.md, "Cold start"). "seqscan-on" is the pool as it was
// before decision 0017, by the DATABASE_URL's override.
func BenchmarkChargeAfterAnAnalyzedColdStart(b *testing.B) {
	for _, bc := range []struct{ name, dsnSuffix string }{
		{"pool-default", ""},
		{"seqscan-on", "&enable_seqscan=on"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store, _ := grownAfterAnAnalyzedColdStart(b, bc.dsnSuffix)
			b.ResetTimer()
			for i := range b.N {
				chargeOnce(b, store, int64(25000+i))
			}
		})
	}
}

// grownAfterAnAnalyzedColdStart makes a database whose empty tables were
// analyzed, runs ten charges on the service's own connection set-up with
// one connection (so that every charge meets the plans the ones before it
// left; the DATABASE_URL with dsnSuffix), then grows payment and
// idempotency_record to 20,000 rows each without an ANALYZE. Orders from
// 25,000 to 60,000 are left to charge.
func grownAfterAnAnalyzedColdStart(t testing.TB, dsnSuffix string) (app.Repos, *gorm.DB) {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// Autovacuum stays off the hot tables: its ANALYZE would replan every
	// cached plan, and this is about the time before it comes.
	_, err = admin.Exec(ctx, `
		INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, 60000) g;
		ALTER TABLE payment SET (autovacuum_enabled = off);
		ALTER TABLE idempotency_record SET (autovacuum_enabled = off);
		ALTER TABLE outbox_event SET (autovacuum_enabled = off);
		ANALYZE`)
	if err != nil {
		t.Fatal(err)
	}
	db, err := repository.Open(dsn+dsnSuffix, repository.PoolConfig{MaxOpenConns: 1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit()

	// The first charges, more than the five custom plans after which
	// PostgreSQL may switch a statement to its generic plan.
	for order := int64(1); order <= 10; order++ {
		chargeOnce(t, store, order)
	}
	// The tables grow, and nothing analyzes them.
	_, err = admin.Exec(ctx, `
		INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		SELECT 'demo-client', g, 42, 'sandbox', 'grown-' || g, 10.00, 'RUB', 'SUCCEEDED' FROM generate_series(101, 20100) g;
		INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, payment_id)
		SELECT 'demo-client', 'grown-' || id, 'h', 'COMPLETED', '{}', 201, id FROM payment WHERE external_payment_id LIKE 'grown-%'`)
	if err != nil {
		t.Fatal(err)
	}
	flushStats(t, admin)
	return store, db
}

// The settings of the service's pool are defaults: one the DATABASE_URL
// names is the operator's.
func TestPoolSettingsGiveWayToTheDatabaseURL(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	for _, tc := range []struct{ dsn, want string }{
		{dsn, "off"},
		{dsn + "&enable_seqscan=on", "on"},
	} {
		db, err := repository.Open(tc.dsn, repository.PoolConfig{MaxOpenConns: 1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = db.Raw(`SHOW enable_seqscan`).Scan(&got).Error
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: enable_seqscan %q (%v), want %q", tc.dsn, got, err, tc.want)
		}
	}
}

// chargeOnce runs a charge's three statements for order, as the use case
// does on the usual path: the lookup, phase 1 on its own, phase 3.
func chargeOnce(t testing.TB, store app.Repos, order int64) {
	t.Helper()
	ctx := context.Background()
	scope := app.IdempotencyScope{ClientID: "demo-client", Key: "cold-" + strconv.FormatInt(order, 10)}
	if _, found, err := store.Keys.Lookup(ctx, scope); err != nil || found {
		t.Fatalf("look up %s: found %v, %v", scope.Key, found, err)
	}
	token := uuid.New()
	res, err := store.Charges.Claim(ctx, app.KeyClaim{
		Scope: scope, CommandHash: "h", Token: token, LockFor: time.Minute}, newCharge(t, order, "10.00", "pi_"+scope.Key))
	if err != nil || !res.Reserved {
		t.Fatalf("claim %s: %+v %v", scope.Key, res, err)
	}
	decided := *res.Payment
	decided.Status = domain.PaymentSucceeded
	event, err := app.NewPaymentEvent(decided, uuid.NullUUID{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	err = store.Charges.Record(ctx, app.ChargeRecord{Key: app.KeyClaim{Scope: scope, Token: token},
		Response: app.StoredResponse{StatusCode: 201, Body: []byte(`{}`)}, Event: event})
	if err != nil {
		t.Fatalf("record %s: %v", scope.Key, err)
	}
}

// reads are what a table's statistics count of the scans that read it.
type reads struct {
	scans int64 // sequential scans
	rows  int64 // rows read, by sequential and index scans
}

// tableReads reads each table's counts so far, after the pool's one
// connection has reported its own.
func tableReads(t testing.TB, db *gorm.DB) map[string]reads {
	t.Helper()
	// A backend reports its counts when it goes idle, at most once a
	// second unless told to: this statement tells it, and the report is
	// made before its answer arrives. The read is a new transaction, so it
	// sees it.
	if err := db.Exec(`SELECT pg_stat_force_next_flush()`).Error; err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Relname string
		Scans   int64
		Rows    int64
	}
	err := db.Raw(`SELECT relname, seq_scan AS scans, seq_tup_read + coalesce(idx_tup_fetch, 0) AS rows
		FROM pg_stat_user_tables`).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]reads{}
	for _, r := range rows {
		out[r.Relname] = reads{scans: r.Scans, rows: r.Rows}
	}
	return out
}

// flushStats has conn's backend report its counts now, so that they are
// not counted later, in the middle of a measurement.
func flushStats(t testing.TB, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
}
