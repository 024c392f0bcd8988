package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/example/payment-service/internal/testdb"
)

// Migration 00017 over what a build of refunds without it wrote: a refund's
// records (one in progress, one completed) with payment_id NULL get their
// refund's payment, so the previous release's jobs, which delete an
// unfinished record with payment_id NULL, never match them; from then on a
// record with a refund and no payment is refused; a charge's records, with
// or without a payment, are untouched. Down drops only the CHECK (the
// records keep their payment), and up again completes.
func TestRefundRecordNamesItsPaymentMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testdb.New(t)
	db, p := openProvider(t, dsn)
	run := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := p.DownTo(ctx, 16); err != nil {
		t.Fatalf("down to 16: %v", err)
	}
	run(`INSERT INTO payment (id, client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, refund_reserved)
		OVERRIDING SYSTEM VALUE VALUES (7, 'c', 701, 42, 'sandbox', 'pi_refunded', 100.00, 'EUR', 'SUCCEEDED', 30.00)`)
	run(`INSERT INTO refund (id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		OVERRIDING SYSTEM VALUE VALUES (1, 7, 'c', 'sandbox', 're_lost', 20.00, 'EUR', 'PENDING'),
		                               (2, 7, 'c', 'sandbox', 're_done', 10.00, 'EUR', 'SUCCEEDED')`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, refund_id)
		VALUES ('c', 'refund-lost', 'refund', 'h1', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 hour', 1)`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, refund_id)
		VALUES ('c', 'refund-done', 'refund', 'h2', 'COMPLETED', '{}', 201, 2)`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, payment_id)
		VALUES ('c', 'charge-done', 'h3', 'COMPLETED', '{}', 201, 7)`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, lock_token, locked_until)
		VALUES ('c', 'charge-nothing', 'h4', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 hour')`)

	if _, err := p.UpTo(ctx, 17); err != nil {
		t.Fatalf("up to 17: %v", err)
	}
	for query, want := range map[string]int{
		`SELECT count(*) FROM idempotency_record WHERE command = 'refund' AND payment_id = 7`:                     2,
		`SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'charge-done' AND payment_id = 7`:        1,
		`SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'charge-nothing' AND payment_id IS NULL`: 1,
		// What the previous release's completer and purge delete: none of the refund's.
		`SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND payment_id IS NULL AND refund_id IS NOT NULL`: 0,
	} {
		if got := count(ctx, t, db, query); got != want {
			t.Errorf("after 00017: %s = %d, want %d", query, got, want)
		}
	}
	wantCode(t, "a refund's record without its payment", "23514",
		exec(ctx, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, refund_id)
			VALUES ('c', 'refund-forgetful', 'refund', 'h5', 'IN_PROGRESS', gen_random_uuid(), now(), 1)`))
	wantCode(t, "clearing a refund record's payment", "23514",
		exec(ctx, db, `UPDATE idempotency_record SET payment_id = NULL WHERE idempotency_key = 'refund-lost'`))

	if _, err := p.DownTo(ctx, 16); err != nil {
		t.Fatalf("down to 16: %v", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record WHERE command = 'refund' AND payment_id = 7`); got != 2 {
		t.Errorf("down to 16: %d refund records keep their payment, want 2", got)
	}
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, refund_id)
		VALUES ('c', 'refund-between', 'refund', 'h6', 'IN_PROGRESS', gen_random_uuid(), now(), 1)`)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'refund-between' AND payment_id = 7`); got != 1 {
		t.Error("up again: the record written while down has no payment")
	}
}
