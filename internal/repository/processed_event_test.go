package repository_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/testdb"
)

// processed_event is per consumer (R-DIST-IDEM-2 is each receiver's own
// record of what it processed): a second consumer, such as a projection
// rebuilt under a new consumer group, applies every event the first one
// applied, and each consumer still applies each event once.
func TestProcessedEventIsPerConsumer(t *testing.T) {
	t.Parallel()
	db, tx := openDB(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	events := []app.OrderCreated{orderEvent(t, 1001, "1.00", t0), orderEvent(t, 1002, "2.00", t0)}

	first := app.NewApplyOrderEvents(tx, "order-projection")
	if got, err := first.Handle(ctx, events); err != nil || got != (app.ApplyResult{Written: 2}) {
		t.Fatalf("first consumer: %+v, %v", got, err)
	}
	// The rebuild: the read model is emptied and a new group replays.
	if err := db.Exec(`TRUNCATE order_projection`).Error; err != nil {
		t.Fatal(err)
	}
	rebuild := app.NewApplyOrderEvents(tx, "order-projection-v2")
	if got, err := rebuild.Handle(ctx, events); err != nil || got != (app.ApplyResult{Written: 2}) {
		t.Fatalf("new consumer: %+v, %v; want both events applied", got, err)
	}
	for _, uc := range []*app.ApplyOrderEvents{first, rebuild} {
		if got, err := uc.Handle(ctx, events); err != nil || got != (app.ApplyResult{Duplicates: 2}) {
			t.Fatalf("redelivery: %+v, %v; want 2 duplicates", got, err)
		}
	}
	if n := countRows(t, db, `SELECT count(*) FROM order_projection`); n != 2 {
		t.Errorf("order_projection rows = %d, want 2", n)
	}
	for _, consumer := range []string{"order-projection", "order-projection-v2"} {
		if n := countRows(t, db, `SELECT count(*) FROM processed_event WHERE consumer_name = ?`, consumer); n != 2 {
			t.Errorf("processed_event rows of %s = %d, want 2", consumer, n)
		}
	}
}

// Migration 00007 re-keys processed_event by (event_id, consumer_name)
// without losing a row, so a deployed consumer skips what it already
// applied; its Down keeps one row per event (the oldest) to restore the
// old key.
func TestProcessedEventMigrationKeepsRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	const before, after = 5, 7
	if _, err := p.DownTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	pkey := func() []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `
			SELECT a.attname FROM pg_index i
			  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			 WHERE i.indrelid = 'processed_event'::regclass AND i.indisprimary
			 ORDER BY array_position(i.indkey, a.attnum)`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var cols []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return cols
	}

	exec(`INSERT INTO processed_event (event_id, consumer_name, processed_at)
	      SELECT gen_random_uuid(), 'order-projection', now() - n * interval '1 hour' FROM generate_series(1, 100) n`)
	if _, err := p.UpTo(ctx, after); err != nil {
		t.Fatal(err)
	}
	if got := pkey(); !slices.Equal(got, []string{"event_id", "consumer_name"}) {
		t.Fatalf("primary key after Up = %v", got)
	}
	if n := count(`SELECT count(*) FROM processed_event WHERE consumer_name = 'order-projection'`); n != 100 {
		t.Fatalf("rows after Up = %d, want the 100 written before", n)
	}
	// The same events for a second consumer are new rows now.
	exec(`INSERT INTO processed_event (event_id, consumer_name) SELECT event_id, 'rebuild' FROM processed_event`)
	if n := count(`SELECT count(*) FROM processed_event`); n != 200 {
		t.Fatalf("rows = %d, want 200", n)
	}

	if _, err := p.DownTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	if got := pkey(); !slices.Equal(got, []string{"event_id"}) {
		t.Fatalf("primary key after Down = %v", got)
	}
	if n := count(`SELECT count(*) FROM processed_event WHERE consumer_name = 'order-projection'`); n != 100 {
		t.Fatalf("rows after Down = %d, want one per event (the oldest, the original consumer's)", n)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
}
