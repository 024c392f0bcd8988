package repository

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/testdb"
)

// Every statement that reads idempotency_record by something other than
// its key reads it through the index meant for it, on the service's own
// connections (enable_seqscan off, decision 0017), on a table shaped like
// production's: almost every record COMPLETED, a few claims of each command
// in progress. A partial index serves a statement only if the statement
// implies its predicate, and migration 00023 narrowed three of them (a
// claim enters only the index of its own recovery point): a reader that
// no longer implied its index's predicate would fall back to another
// index or a whole scan, and nothing but its plan would show it.
//
// pgx prepares each statement once per connection, and after five
// executions PostgreSQL may keep the generic plan, made without the
// parameters' values: the statements compiled from @name SQL are explained
// both ways. The jobs' two GORM statements bind 'IN_PROGRESS' as a
// parameter, so only their custom plans can use a partial index at all;
// PostgreSQL keeps custom plans for them because the generic one costs
// far more (a scan of the whole table), so those are what is checked.
func TestClaimReadersUseTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := Open(testdb.New(t), PoolConfig{MaxOpenConns: 2}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	// 20,000 orders, each charged: 1 in 40 authorized (and captured), 1 in
	// 1,000 still PENDING with its charge's claim in progress; a refund of
	// every tenth, 1 in 40 of them in progress; 1 in 10 captures in
	// progress; claims that reserved nothing, and saga steps' claims.
	err = db.Exec(`
		INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, 20000) g;
		INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method)
		SELECT 'c', g, 42, 'sandbox', 'pi_' || g, 10.00, 'RUB',
		       CASE WHEN g % 1000 = 0 THEN 'PENDING' WHEN g % 40 = 1 THEN 'AUTHORIZED' ELSE 'SUCCEEDED' END,
		       CASE WHEN g % 40 = 1 THEN 'manual' ELSE 'automatic' END
		  FROM generate_series(1, 20000) g;
		INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, lock_token, locked_until, payment_id, created_at)
		SELECT 'c', 'k' || p.id, 'charge', 'h', CASE WHEN p.status = 'PENDING' THEN 'IN_PROGRESS' ELSE 'COMPLETED' END,
		       CASE WHEN p.status <> 'PENDING' THEN '{}'::json END, CASE WHEN p.status <> 'PENDING' THEN 201 END,
		       CASE WHEN p.status = 'PENDING' THEN gen_random_uuid() END,
		       CASE WHEN p.status = 'PENDING' THEN now() - interval '1 minute' END,
		       p.id, now() - p.id * interval '10 seconds'
		  FROM payment p;
		INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		SELECT id, 'c', 'sandbox', 're_' || id, 1.00, 'RUB', CASE WHEN id % 400 = 2 THEN 'PENDING' ELSE 'SUCCEEDED' END
		  FROM payment WHERE status = 'SUCCEEDED' AND id % 10 = 2;
		INSERT INTO payment_transition (payment_id, client_id, kind, amount, currency, reference, provider_key, status)
		SELECT id, 'c', 'capture', 5.00, 'RUB', 'ref', 'cap_' || id, CASE WHEN (id / 40) % 10 = 0 THEN 'PENDING' ELSE 'SUCCEEDED' END
		  FROM payment WHERE status = 'AUTHORIZED';
		INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, lock_token, locked_until, payment_id, refund_id, transition_id)
		SELECT 'c', kind || id, kind, 'h', CASE WHEN pending THEN 'IN_PROGRESS' ELSE 'COMPLETED' END,
		       CASE WHEN NOT pending THEN '{}'::json END, CASE WHEN NOT pending THEN 201 END,
		       CASE WHEN pending THEN gen_random_uuid() END, CASE WHEN pending THEN now() - interval '1 minute' END,
		       payment_id, refund_id, transition_id
		  FROM (SELECT 'refund' AS kind, id, status = 'PENDING' AS pending, payment_id, id AS refund_id, NULL::bigint AS transition_id FROM refund
		        UNION ALL
		        SELECT 'capture', id, status = 'PENDING', payment_id, NULL, id FROM payment_transition) o;
		INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, created_at)
		SELECT 'saga', '§saga:' || g, 'charge', 'h', 'IN_PROGRESS', gen_random_uuid(), now() + interval '1 minute', now() - interval '1 hour'
		  FROM generate_series(1, 30) g;
		ANALYZE`).Error
	if err != nil {
		t.Fatal(err)
	}
	// A PENDING payment (its charge's claim in progress), a refund and a
	// capture in progress.
	const inProgressPayment, inProgressRefund, inProgressCapture = "'sandbox', 'pi_1000'", "'sandbox', 're_802'", "'cap_41'"

	gormSQL := func(q *gorm.DB) string {
		return q.Statement.Dialector.Explain(q.Statement.SQL.String(), q.Statement.Vars...)
	}
	dry := db.Session(&gorm.Session{DryRun: true})
	commands := []app.CommandName{app.CommandCharge, app.CommandRefund, app.CommandCapture, app.CommandVoid}
	var rows []idempotencyRecordRow
	scope := app.IdempotencyScope{ClientID: "c", Key: "k1000"}

	for _, tc := range []struct {
		name string
		sql  string
		// args are the values of $1, $2, ... as SQL literals.
		args string
		// index is the index of idempotency_record the plan must read;
		// any is the ones it may read instead.
		index string
		any   []string
		// customOnly: a GORM statement, explained with its values in the
		// text.
		customOnly bool
	}{
		{name: "a provider's event about a payment (reportedChargeSQL)", sql: reportedChargeSQL.text, args: inProgressPayment,
			index: "ix_idempotency_record_payment_in_progress"},
		{name: "a provider's event about a refund (reportedRefundSQL)", sql: reportedRefundSQL.text, args: inProgressRefund,
			index: "ix_idempotency_record_refund_in_progress"},
		{name: "a provider's event about a capture or void (reportedTransitionSQL)", sql: reportedTransitionSQL.text, args: inProgressCapture,
			index: "ix_idempotency_record_transition_in_progress"},
		{name: "the unresolved saga steps (unresolvedStepsSQL)", sql: unresolvedStepsStmt.text, args: "'saga', '§saga:', 60000000",
			any: []string{"ix_idempotency_record_abandoned", "idempotency_record_pkey"}},
		{name: "the purge (retention)", sql: retentionTargets[app.TableIdempotencyRecord].sql(), args: "now() - interval '72 hours', 5000",
			any: []string{"ix_idempotency_record_created_at", "idempotency_record_pkey"}},
		{name: "the completer's list (ListAbandoned)", sql: gormSQL(listAbandoned(dry, commands, time.Minute, 100).Find(&rows)),
			index: "ix_idempotency_record_abandoned", customOnly: true},
		{name: "the completer's release (ReleaseAbandoned)", sql: gormSQL(releaseAbandoned(dry, commands, scope).Delete(&idempotencyRecordRow{})),
			index: "idempotency_record_pkey", customOnly: true},
	} {
		modes := []string{"force_custom_plan", "force_generic_plan"}
		if tc.customOnly {
			modes = modes[:1]
		}
		for _, mode := range modes {
			used := explainIndexes(ctx, t, sqlDB, mode, tc.sql, tc.args)
			ok := len(used.indexes) > 0 && used.seqScans == 0
			for _, index := range used.indexes {
				ok = ok && (index == tc.index || slices.Contains(tc.any, index))
			}
			if tc.index != "" {
				ok = ok && slices.Contains(used.indexes, tc.index)
			}
			if !ok {
				t.Errorf("%s, %s: idempotency_record read by %d sequential scans and the indexes %v; want %s %v only:\n%s",
					tc.name, mode, used.seqScans, used.indexes, tc.index, tc.any, used.plan)
			}
		}
	}
}

// readsOfIdempotencyRecord are the scans of idempotency_record in a plan.
type readsOfIdempotencyRecord struct {
	seqScans int
	indexes  []string
	plan     string
}

// explainIndexes prepares q on a connection of db of its own, explains
// its execution with args (SQL literals, empty for none) under
// plan_cache_mode mode, and returns how the plan reads idempotency_record.
func explainIndexes(ctx context.Context, t *testing.T, db *sql.DB, mode, q, args string) readsOfIdempotencyRecord {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	execute := "EXECUTE reader"
	if args != "" {
		execute += "(" + args + ")"
	}
	var plan []byte
	for _, stmt := range []string{"SET plan_cache_mode = " + mode, "PREPARE reader AS " + q} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "DEALLOCATE reader; RESET plan_cache_mode") }()
	if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+execute).Scan(&plan); err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	var doc []map[string]map[string]any
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	reads := readsOfIdempotencyRecord{plan: indent(plan)}
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		if node["Relation Name"] == "idempotency_record" && node["Node Type"] == "Seq Scan" {
			reads.seqScans++
		}
		// A bitmap index scan names its index, not its table.
		if index, ok := node["Index Name"].(string); ok && strings.Contains(index, "idempotency_record") {
			reads.indexes = append(reads.indexes, index)
		}
		children, _ := node["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0]["Plan"])
	return reads
}
