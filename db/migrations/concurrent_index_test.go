package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/testdb"
)

// A running fleet has one outbox relay leading and the others waiting in
// SELECT pg_advisory_lock(...): one statement, holding one snapshot for as
// long as the leader lives. CREATE INDEX CONCURRENTLY waits for every
// snapshot older than its own, so migrations 00018 and 00019 run beside two
// replicas or more waited for ever (found by TestRollingDeployMixedFleet).
// Up cancels such waits while a build waits; the standby competes again.
func TestMigrationsFinishBesideARelayStandby(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testdb.New(t)
	downTo(ctx, t, dsn, 17) // 00018 builds its indexes concurrently

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	const relayKey = 4242
	leader, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	if _, err := leader.ExecContext(ctx, "SELECT pg_advisory_lock($1)", relayKey); err != nil {
		t.Fatal(err)
	}
	standby, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	waited := make(chan error, 1)
	go func() {
		_, err := standby.ExecContext(ctx, "SELECT pg_advisory_lock($1)", relayKey)
		waited <- err
	}()
	// The standby is waiting before the migration starts, as in a fleet.
	for {
		var waiting bool
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the standby never waited for the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Without the cancelling, the build waits for the standby, which waits
	// for the leader, which is idle: until this deadline.
	migrateCtx, cancelMigrate := context.WithTimeout(ctx, 45*time.Second)
	defer cancelMigrate()
	if err := migrations.Up(migrateCtx, dsn); err != nil {
		t.Fatalf("the migrations beside a waiting relay standby: %v", err)
	}
	select {
	case err := <-waited:
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			t.Fatalf("the standby's wait ended with %v, want it cancelled (57014)", err)
		}
	case <-ctx.Done():
		t.Fatal("the standby still waits")
	}
}
