package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/testdb"
)

// Migration 00013 under the releases before it: their claim does not name
// the command column and must still insert, as a charge's record; and the
// way back refuses while a record of another command exists, because those
// releases would read it as a charge's and delete it.
func TestIdempotencyRecordCommandMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, p := openProvider(t, testdb.New(t))
	run := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// An older release's claim: no command column.
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, lock_token, locked_until)
		VALUES ('c', 'old-release', 'h', 'IN_PROGRESS', gen_random_uuid(), now())`)
	var command string
	if err := db.QueryRowContext(ctx, `SELECT command FROM idempotency_record WHERE idempotency_key = 'old-release'`).Scan(&command); err != nil {
		t.Fatal(err)
	}
	if command != "charge" {
		t.Fatalf("an older release's claim got command %q, want charge", command)
	}

	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
		VALUES ('c', 'refund', 'refund', 'h', 'IN_PROGRESS', gen_random_uuid(), now())`)
	if _, err := p.DownTo(ctx, 12); err == nil {
		t.Fatal("migrated down with a refund's record in the table")
	}
	run(`DELETE FROM idempotency_record WHERE command = 'refund'`)
	if _, err := p.DownTo(ctx, 12); err != nil {
		t.Fatalf("down to 12 with only charges' records: %v", err)
	}
	var columns int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'idempotency_record' AND column_name = 'command'`).Scan(&columns); err != nil {
		t.Fatal(err)
	}
	if columns != 0 {
		t.Fatal("the command column is still there after migrating down")
	}
}
