package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/example/payment-service/internal/testdb"
)

// Migrations 00023 and 00024: a claim enters only the indexes that find
// it. Each claim below is the row a command's phase 1 inserts; the index
// entries it makes are the WAL records of its insert less the heap's one:
// PostgreSQL writes one record per index entry, counted exactly for the
// statement by EXPLAIN (ANALYZE, WAL). On 00022's indexes every claim
// entered all six; with 00023 a charge's, a refund's or a capture's
// enters four (the primary key, created_at, the completer's abandoned and
// its own column's), one that reserved nothing three, and a command with
// no column of its own three (nothing would find it by its reservation);
// the abandoned index holds them by locked_until IS NOT NULL, where
// 00022's (00005's) said status = 'IN_PROGRESS'. With 00024 every claim
// enters three: the primary key, created_at and the one index of the
// claims in progress, by command and recovery point, which the completer
// and a provider's event both read, a fourth command's too; the previous
// release's charge's claim (its payment in payment_id alone) enters the
// index kept for it as well: four. Down to 00022 and up again, as the
// migrations are tested both ways.
func TestAClaimEntersOnlyItsOwnIndexes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, p := openProvider(t, testdb.New(t))
	run := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run(`INSERT INTO payment (id, client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method)
		OVERRIDING SYSTEM VALUE VALUES
		(1, 'c', 1, 42, 'sandbox', 'pi_1', 10, 'RUB', 'SUCCEEDED', 'automatic'),
		(2, 'c', 2, 42, 'sandbox', 'pi_2', 10, 'RUB', 'AUTHORIZED', 'manual')`)
	run(`INSERT INTO refund (id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		OVERRIDING SYSTEM VALUE VALUES (1, 1, 'c', 'sandbox', 're_1', 1, 'RUB', 'PENDING')`)
	run(`INSERT INTO payment_transition (id, payment_id, client_id, kind, provider_key, status)
		OVERRIDING SYSTEM VALUE VALUES (1, 2, 'c', 'void', 'void_2', 'PENDING')`)

	// The claims, as each command's statement inserts them (the clause
	// claimed of internal/repository/statements/*_claim.sql): a charge
	// names its payment; a refund its refund and its payment (00017); a
	// capture or void its transition and its payment; from 00024 on each
	// names its reservation as its recovery point too, but the previous
	// release's charge, which names its payment alone.
	claims := []struct {
		name          string
		command       string
		recoveryPoint int // from 00024 on; 0: none
		columns       string
		values        string
	}{
		{"a charge's claim", "charge", 1, "payment_id", "1"},
		{"a refund's claim", "refund", 1, "refund_id, payment_id", "1, 1"},
		{"a void's claim", "void", 1, "transition_id, payment_id", "1, 2"},
		{"a claim that reserved nothing", "charge", 0, "", ""},
		{"the previous release's charge's claim", "charge", 0, "payment_id", "1"},
		{"a fourth command's claim", "payout", 9, "payment_id", "1"},
	}
	key := 0
	for _, schema := range []struct {
		name    string
		version int64
		entries []int // per claim, in the order of claims
		// every is the index of every claim in progress, the completer's,
		// and predicate its predicate.
		every, predicate string
	}{
		{"00022's indexes", 22, []int{6, 6, 6, 6, 6, 6}, "ix_idempotency_record_abandoned", "(status = 'IN_PROGRESS'::text)"},
		{"00023's", 23, []int{4, 4, 4, 3, 4, 3}, "ix_idempotency_record_abandoned", "(locked_until IS NOT NULL)"},
		{"00024's", 24, []int{3, 3, 3, 3, 4, 3}, "ix_idempotency_record_in_progress", "(locked_until IS NOT NULL)"},
	} {
		t.Run(schema.name, func(t *testing.T) {
			if _, err := p.DownTo(ctx, schema.version); err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpTo(ctx, schema.version); err != nil {
				t.Fatal(err)
			}
			var predicate string
			if err := db.QueryRowContext(ctx, `SELECT pg_get_expr(indpred, indrelid) FROM pg_index
				WHERE indexrelid = to_regclass($1) AND indisvalid`, schema.every).Scan(&predicate); err != nil {
				t.Fatalf("%s: %v", schema.every, err)
			}
			if predicate != schema.predicate {
				t.Errorf("%s WHERE %s, want WHERE %s", schema.every, predicate, schema.predicate)
			}
			inserts := make([]string, len(claims))
			for i, c := range claims {
				columns, values := c.columns, c.values
				if schema.version >= 24 && c.recoveryPoint != 0 {
					columns, values = columns+", recovery_point", fmt.Sprintf("%s, %d", values, c.recoveryPoint)
				}
				if columns != "" {
					columns, values = ", "+columns, ", "+values
				}
				// $1: the key.
				inserts[i] = fmt.Sprintf(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until%s)
					VALUES ('c', $1, '%s', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() + interval '1 minute'%s)`, columns, c.command, values)
			}
			// Once each first: the first entry of an empty index also
			// writes its root page.
			for _, insert := range inserts {
				key++
				run(insert, fmt.Sprint("warm-", key))
			}
			for i, c := range claims {
				key++
				if got := indexEntries(ctx, t, db, inserts[i], fmt.Sprint("claim-", key)); got != schema.entries[i] {
					t.Errorf("%s enters %d indexes, want %d", c.name, got, schema.entries[i])
				}
			}
		})
	}
}

// indexEntries runs insert, a one-row INSERT, under EXPLAIN (ANALYZE, WAL),
// and returns the WAL records its insert wrote less the heap's one: the
// index entries it made (none of the inserts here fills a page, so no
// page splits).
func indexEntries(ctx context.Context, t *testing.T, db *sql.DB, insert string, args ...any) int {
	t.Helper()
	var plan []byte
	if err := db.QueryRowContext(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+insert, args...).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", insert, err)
	}
	var doc []struct {
		Plan struct {
			NodeType   string `json:"Node Type"`
			Operation  string `json:"Operation"`
			WALRecords int    `json:"WAL Records"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 || doc[0].Plan.Operation != "Insert" {
		t.Fatalf("the plan of %s: %s (%v)", insert, plan, err)
	}
	return doc[0].Plan.WALRecords - 1
}
