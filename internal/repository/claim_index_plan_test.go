package repository

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
)

// Every statement that reads idempotency_record by something other than
// its key reads it through the index meant for it, on the service's own
// connections (enable_seqscan off, decision 0017), on a table shaped like
// production's (planStates). A partial index serves a statement only if
// the statement implies its predicate, and migrations 00023 and 00024
// made them two: every claim in progress by command and recovery point,
// whose predicate names locked_until alone, so that no statement that
// finds a record by its key reads it
// (TestKeyAddressedStatementsUseThePrimaryKey), and the previous
// release's charges' claims by payment_id. A reader that no longer
// implied its index's predicate would fall back to another index or a
// whole scan, and nothing but its plan would show it.
//
// pgx prepares each statement once per connection, and after five
// executions PostgreSQL may keep the generic plan, made without the
// parameters' values: every statement is explained both ways.
func TestClaimReadersUseTheirIndexes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, sqlDB := filledLikeProduction(t)
	// A PENDING payment (its charge's claim in progress), one the previous
	// release claimed, a refund and a capture in progress.
	const inProgressPayment, previousPayment, inProgressRefund, inProgressCapture = "'sandbox', 'pi_1000'", "'sandbox', 'pi_4000'", "'sandbox', 're_802'", "'cap_41'"

	readers := []planCase{
		// Every command's claims are in one index, by command and recovery
		// point; the previous release's charges' in one of their own,
		// by payment_id (migration 00024).
		{explained: explained{"a provider's event about a payment (reportedChargeSQL)", reportedChargeSQL.text, inProgressPayment},
			index: "ix_idempotency_record_in_progress", also: "ix_idempotency_record_previous_charge"},
		{explained: explained{"a provider's event about a payment the previous release claimed (reportedChargeSQL)", reportedChargeSQL.text, previousPayment},
			index: "ix_idempotency_record_in_progress", also: "ix_idempotency_record_previous_charge"},
		{explained: explained{"a provider's event about a refund (reportedRefundSQL)", reportedRefundSQL.text, inProgressRefund},
			index: "ix_idempotency_record_in_progress"},
		{explained: explained{"a provider's event about a capture or void (reportedTransitionSQL)", reportedTransitionSQL.text, inProgressCapture},
			index: "ix_idempotency_record_in_progress"},
		{explained: explained{"the unresolved saga steps (unresolvedStepsSQL)", unresolvedStepsStmt.text, "'saga', '§saga:', 60000000"},
			any: []string{"ix_idempotency_record_in_progress", "idempotency_record_pkey"}},
		{explained: explained{"the purge (retention)", retentionStmts[app.TableIdempotencyRecord].text, "now() - interval '72 hours', 5000"},
			any: []string{"ix_idempotency_record_created_at", "idempotency_record_pkey"}},
		{explained: named("the completer's list (ListAbandoned)", listAbandonedStmt),
			index: "ix_idempotency_record_in_progress"},
	}
	checkPlans(ctx, t, sqlDB, readers)
}

// planCase is a statement whose plans must read idempotency_record by
// index only: index is the one it must read, also one it must read too,
// any the ones it may read instead.
type planCase struct {
	explained
	index, also string
	any         []string
}

// checkPlans explains every case in custom and generic plans, in each of
// planStates in turn, and reports each plan that reads idempotency_record
// by a sequential scan, by an index the case does not allow, or without
// its index.
func checkPlans(ctx context.Context, t *testing.T, sqlDB *sql.DB, cases []planCase) {
	t.Helper()
	for _, state := range planStates {
		state.enter(ctx, t, sqlDB)
		for _, tc := range cases {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				used := explainIndexes(ctx, t, sqlDB, mode, tc.sql, tc.args)
				ok := len(used.indexes) > 0 && used.seqScans == 0
				for _, index := range used.indexes {
					ok = ok && (index == tc.index || index == tc.also || slices.Contains(tc.any, index))
				}
				for _, want := range []string{tc.index, tc.also} {
					ok = ok && (want == "" || slices.Contains(used.indexes, want))
				}
				if !ok {
					t.Errorf("%s, %s, %s: idempotency_record read by %d sequential scans and the indexes %v; want %s %s %v only:\n%s",
						state.name, tc.name, mode, used.seqScans, used.indexes, tc.index, tc.also, tc.any, used.plan)
				}
			}
		}
	}
}

// filledLikeProduction is a new database on the service's own connections
// (Open: enable_seqscan off, decision 0017), two of them, filled and
// analyzed as production's tables are shaped: almost every record
// COMPLETED, a few claims of each command in progress.
func filledLikeProduction(t *testing.T) (*gorm.DB, *sql.DB) {
	t.Helper()
	db, sqlDB := openInternal(t, 2)
	// 20,000 orders, each charged: 1 in 40 authorized (and captured), 1 in
	// 1,000 still PENDING with its charge's claim in progress, 1 in 4,000
	// claimed by the previous release (payment_id, no recovery point:
	// migration 00024); a refund of every tenth, 1 in 40 of them in
	// progress; 1 in 10 captures in progress; claims that reserved nothing,
	// and saga steps' claims.
	err := db.Exec(`
		INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, 20000) g;
		INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method)
		SELECT 'c', g, 42, 'sandbox', 'pi_' || g, 10.00, 'RUB',
		       CASE WHEN g % 1000 = 0 THEN 'PENDING' WHEN g % 40 = 1 THEN 'AUTHORIZED' ELSE 'SUCCEEDED' END,
		       CASE WHEN g % 40 = 1 THEN 'manual' ELSE 'automatic' END
		  FROM generate_series(1, 20000) g;
		INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, lock_token, locked_until, payment_id, recovery_point, created_at)
		SELECT 'c', 'k' || p.id, 'charge', 'h', CASE WHEN p.status = 'PENDING' THEN 'IN_PROGRESS' ELSE 'COMPLETED' END,
		       CASE WHEN p.status <> 'PENDING' THEN '{}'::json END, CASE WHEN p.status <> 'PENDING' THEN 201 END,
		       CASE WHEN p.status = 'PENDING' THEN gen_random_uuid() END,
		       CASE WHEN p.status = 'PENDING' THEN now() - interval '1 minute' END,
		       p.id, CASE WHEN p.id % 4000 <> 0 THEN p.id END, now() - p.id * interval '10 seconds'
		  FROM payment p;
		INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		SELECT id, 'c', 'sandbox', 're_' || id, 1.00, 'RUB', CASE WHEN id % 400 = 2 THEN 'PENDING' ELSE 'SUCCEEDED' END
		  FROM payment WHERE status = 'SUCCEEDED' AND id % 10 = 2;
		INSERT INTO payment_transition (payment_id, client_id, kind, amount, currency, reference, provider_key, status)
		SELECT id, 'c', 'capture', 5.00, 'RUB', 'ref', 'cap_' || id, CASE WHEN (id / 40) % 10 = 0 THEN 'PENDING' ELSE 'SUCCEEDED' END
		  FROM payment WHERE status = 'AUTHORIZED';
		INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, lock_token, locked_until, payment_id, refund_id, transition_id, recovery_point)
		SELECT 'c', kind || id, kind, 'h', CASE WHEN pending THEN 'IN_PROGRESS' ELSE 'COMPLETED' END,
		       CASE WHEN NOT pending THEN '{}'::json END, CASE WHEN NOT pending THEN 201 END,
		       CASE WHEN pending THEN gen_random_uuid() END, CASE WHEN pending THEN now() - interval '1 minute' END,
		       payment_id, refund_id, transition_id, id
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
	return db, sqlDB
}

// planStates are the shapes of filledLikeProduction's tables, in order,
// that the plan tests explain each statement in. The planner picks by the
// statistics of the last analyze, and a partial index over the claims in
// progress is as small as they were then.
var planStates = []planState{
	{name: "as filled (150 claims in progress)"},
	// At 16 clients a handful of claims are in progress at any moment, and
	// vacuum and analyze find about as many: the partial indexes'
	// statistics say a page and a tuple or none. The claim the key tests
	// address (k1000) stays in progress.
	{name: "after a vacuum that found one claim in progress", sql: []string{`
		UPDATE idempotency_record
		   SET status = 'COMPLETED', response = '{}', http_status = 201, lock_token = NULL, locked_until = NULL
		 WHERE status = 'IN_PROGRESS' AND idempotency_key <> 'k1000'`,
		`VACUUM ANALYZE idempotency_record`}},
}

// planState is a shape of the tables, and the statements that bring the
// one before it to it.
type planState struct {
	name string
	sql  []string
}

// enter brings db to the state.
func (s planState) enter(ctx context.Context, t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range s.sql {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
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
		// INSERT ... ON CONFLICT finds the row it conflicts with by its
		// arbiter index.
		arbiters, _ := node["Conflict Arbiter Indexes"].([]any)
		for _, a := range arbiters {
			if index, ok := a.(string); ok && strings.Contains(index, "idempotency_record") {
				reads.indexes = append(reads.indexes, index)
			}
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

// Every statement that addresses one record by its key (client_id,
// idempotency_key) finds it by the primary key, in custom and generic
// plans, on the service's own connections: each command's claim (its
// takeover is the ON CONFLICT branch, which the primary key arbitrates),
// record and release, the lock check, the answers stored without a
// provider call, the lock's early expiry and the completer's release.
// Most of them also name status = 'IN_PROGRESS', and a partial index
// whose predicate that implies can serve them too, by a scan of all of it
// filtered by key: after an analyze that found few claims in progress
// (planStates) the planner chose ix_idempotency_record_abandoned so while
// its predicate was status = 'IN_PROGRESS', thinking it a page, where it
// also holds, until vacuum, an entry for every claim completed since, so
// the read grew with the load between two vacuums (migration 00023).
func TestKeyAddressedStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, sqlDB := filledLikeProduction(t)

	statements := []explained{
		named("the lookup (lookupKeySQL)", lookupKeyStmt),
		named("a charge's claim (claimAndReserveSQL)", claimAndReserveStmt),
		named("a refund's claim (claimAndReserveRefundSQL)", claimAndReserveRefundStmt),
		named("a capture's claim (claimCaptureSQL)", claimTransitionStmts[app.CommandCapture]),
		named("a void's claim (claimVoidSQL)", claimTransitionStmts[app.CommandVoid]),
		named("a charge's record (recordOutcomeSQL)", recordOutcomeStmt),
		named("a refund's record (recordRefundOutcomeSQL)", recordRefundOutcomeStmt),
		named("a capture's or void's record (recordTransitionSQL)", recordTransitionStmt),
		named("the lock check (lockStillHeldStmt)", lockStillHeldStmt),
		named("a charge's release (releaseChargeSQL)", releaseChargeStmt),
		named("a refund's release (releaseRefundSQL)", releaseRefundStmt),
		named("a capture's or void's release (releaseTransitionSQL)", releaseTransitionStmt),
		named("an answer without a provider call (completeKeySQL)", completeKeyStmt),
		named("an answer under a key that holds none (answerKeySQL)", answerKeyStmt),
		named("the lock's early expiry (expireLockSQL)", expireLockStmt),
		named("a charge's recovery point on the rare path (setPaymentRecoveryPointSQL)", setPaymentRecoveryPointStmt),
		named("a refund's recovery point on the rare path (setRefundRecoveryPointSQL)", setRefundRecoveryPointStmt),
		named("the completer's release (ReleaseAbandoned)", releaseAbandonedStmt),
	}
	cases := make([]planCase, len(statements))
	for i, st := range statements {
		cases[i] = planCase{explained: st, any: []string{"idempotency_record_pkey"}}
	}
	checkPlans(ctx, t, sqlDB, cases)
}

// explained is a statement to explain: its text with $1, $2, ... and
// their values as SQL literals.
type explained struct {
	name, sql, args string
}

// planValues are the values of the named statements' parameters, as SQL
// literals: the charge's claim in progress of the filled database
// (filledLikeProduction), its payment, and values of the right type for
// the rest.
var planValues = map[string]string{ //nolint:gosec // G101: SQL literals of the plan's parameters, no credential
	"client": "'c'", "key": "'k1000'", "token": "'6f1d1d8e-63a5-4a4e-9b4e-7d0a3f3b8f10'", "hash": "'h'",
	"lock_micros": "60000000", "atomic": "true", "command": "'charge'",
	"order": "1000", "customer": "42", "amount": "10.00", "currency": "'RUB'", "provider": "'sandbox'",
	"external": "'pi_1000'", "capture_method": "'automatic'", "payment_method": "''", "payment": "1000", "payment_id": "1000",
	"refund": "802", "transition": "41", "kind": "'capture'", "reference": "'ref'", "provider_key": "'cap_41'",
	"response": "'{}'", "http_status": "201", "status": "'SUCCEEDED'", "final_status": "'SUCCEEDED'",
	"payment_status": "'SUCCEEDED'", "event_id": "'0b6b7f3c-4f0e-4f7e-9a51-2f1f3e0d6a11'", "topic": "'t'",
	"message_key": "'m'", "event_type": "'e'", "payload": "'{}'", "trace_context": "''",
	"reply": "false", "reply_event_id": "'0b6b7f3c-4f0e-4f7e-9a51-2f1f3e0d6a12'", "reply_topic": "'t'",
	"reply_key": "'m'", "reply_type": "'e'",
	"commands": "ARRAY['charge', 'refund', 'capture', 'void']", "micros": "60000000", "limit": "100",
}

// named is q, a statement compiled from @name SQL, with planValues.
func named(name string, q namedSQL) explained {
	args := make([]string, len(q.names))
	for i, n := range q.names {
		v, ok := planValues[n]
		if !ok {
			panic("no plan value for @" + n + " of " + name)
		}
		args[i] = v
	}
	return explained{name: name, sql: q.text, args: strings.Join(args, ", ")}
}
