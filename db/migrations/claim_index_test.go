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

// Migration 00023: a claim enters only the index that finds it by its own
// recovery point. Each claim below is the row a command's phase 1 inserts;
// the index entries it makes are the WAL records of its insert less the
// heap's one: PostgreSQL writes one record per index entry, counted
// exactly for the statement by EXPLAIN (ANALYZE, WAL). On 00022's indexes
// every claim entered all six; with 00023 a charge's, a refund's or a
// capture's enters four (the primary key, created_at, the completer's
// abandoned and its own), one that reserved nothing three; the abandoned
// index holds them by locked_until IS NOT NULL, where 00022's (00005's)
// said status = 'IN_PROGRESS'. Down to 00022 and up again, as the
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
	// names its payment; a refund its refund and
	// its payment (00017); a capture or void its transition and its payment.
	claims := []struct {
		name   string
		insert string // $1: the key
	}{
		{"a charge's claim", `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, payment_id)
			VALUES ('c', $1, 'charge', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() + interval '1 minute', 1)`},
		{"a refund's claim", `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, refund_id, payment_id)
			VALUES ('c', $1, 'refund', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() + interval '1 minute', 1, 1)`},
		{"a void's claim", `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, transition_id, payment_id)
			VALUES ('c', $1, 'void', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() + interval '1 minute', 1, 2)`},
		{"a claim that reserved nothing", `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
			VALUES ('c', $1, 'charge', 'h', 'IN_PROGRESS', gen_random_uuid(), clock_timestamp() + interval '1 minute')`},
	}
	key := 0
	for _, schema := range []struct {
		name    string
		version int64
		entries []int // per claim, in the order of claims
		// abandoned is ix_idempotency_record_abandoned's predicate.
		abandoned string
	}{
		{"00022's indexes", 22, []int{6, 6, 6, 6}, "(status = 'IN_PROGRESS'::text)"},
		{"00023's", 23, []int{4, 4, 4, 3}, "(locked_until IS NOT NULL)"},
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
				WHERE indexrelid = 'ix_idempotency_record_abandoned'::regclass AND indisvalid`).Scan(&predicate); err != nil {
				t.Fatal(err)
			}
			if predicate != schema.abandoned {
				t.Errorf("ix_idempotency_record_abandoned WHERE %s, want WHERE %s", predicate, schema.abandoned)
			}
			// Once each first: the first entry of an empty index also
			// writes its root page.
			for _, c := range claims {
				key++
				run(c.insert, fmt.Sprint("warm-", key))
			}
			for i, c := range claims {
				key++
				if got := indexEntries(ctx, t, db, c.insert, fmt.Sprint("claim-", key)); got != schema.entries[i] {
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
