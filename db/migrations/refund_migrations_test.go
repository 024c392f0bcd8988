package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// Migrations 00015 (refund, payment.refund_reserved) and 00016
// (idempotency_record.refund_id) over a database that holds what the
// releases before them wrote: every payment starts with nothing refunded
// and an older release's insert still works; the charge's records keep
// their recovery point and the charge's statement still takes one over;
// a refund's record written before 00016 keeps no refund_id, and the
// refund's statement writes one after it; refund_id refers to a refund.
// Then down to 00015 and 00014 and up again, as the project's migrations
// are tested both ways.
func TestRefundMigrationsOverEarlierRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testdb.New(t)
	db, p, run := downTo(ctx, t, dsn, 14)

	// What a release before 00015 wrote: a charged payment and its
	// completed record, and a charge whose answer was lost (PENDING, its
	// claim's lock run out), as their inserts name their columns.
	run(`INSERT INTO payment (id, client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		OVERRIDING SYSTEM VALUE VALUES
		(1, 'c', 501, 42, 'sandbox', 'pi_paid', 100.00, 'EUR', 'SUCCEEDED'),
		(2, 'c', 502, 42, 'sandbox', 'pi_lost', 50.00, 'EUR', 'PENDING')`)
	run(`SELECT setval(pg_get_serial_sequence('payment', 'id'), 2)`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, payment_id)
		VALUES ('c', 'paid', 'h-paid', 'COMPLETED', '{}', 201, 1)`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, lock_token, locked_until, payment_id)
		VALUES ('c', 'lost', 'h-lost', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 minute', 2)`)

	if _, err := p.UpTo(ctx, 15); err != nil {
		t.Fatalf("up to 15: %v", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM payment WHERE refund_reserved = 0`); got != 2 {
		t.Fatalf("%d of 2 earlier payments have nothing refunded", got)
	}
	// An older release's insert, which does not name refund_reserved.
	run(`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		VALUES ('c', 503, 42, 'sandbox', 'pi_old_release', 10.00, 'EUR', 'PENDING')`)
	if got := count(ctx, t, db, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_old_release' AND refund_reserved = 0`); got != 1 {
		t.Fatal("an older release's payment does not start with nothing refunded")
	}
	wantCode(t, "a refund total beyond the amount", "23514", exec(ctx, db, `UPDATE payment SET refund_reserved = 100.01 WHERE id = 1`))
	// A refund made between 00015 and 00016, and its record, which has
	// no column for it yet.
	run(`INSERT INTO refund (id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		OVERRIDING SYSTEM VALUE VALUES (1, 1, 'c', 'sandbox', 're_before', 20.00, 'EUR', 'PENDING')`)
	run(`SELECT setval(pg_get_serial_sequence('refund', 'id'), 1)`)
	run(`UPDATE payment SET refund_reserved = 20.00 WHERE id = 1`)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until)
		VALUES ('c', 'refund-before', 'refund', 'h-refund', 'IN_PROGRESS', gen_random_uuid(), now() + interval '1 minute')`)

	if _, err := p.UpTo(ctx, 16); err != nil {
		t.Fatalf("up to 16: %v", err)
	}
	for query, want := range map[string]int{
		`SELECT count(*) FROM idempotency_record WHERE refund_id IS NULL`:                                        3,
		`SELECT count(*) FROM idempotency_record WHERE command = 'charge' AND payment_id IN (1, 2)`:              2,
		`SELECT count(*) FROM idempotency_record WHERE command = 'refund' AND idempotency_key = 'refund-before'`: 1,
	} {
		if got := count(ctx, t, db, query); got != want {
			t.Errorf("after 00016: %s = %d, want %d", query, got, want)
		}
	}
	wantCode(t, "a refund_id that is no refund", "23503",
		exec(ctx, db, `UPDATE idempotency_record SET refund_id = 999 WHERE idempotency_key = 'refund-before'`))

	// The service's own statements on the upgraded schema: this release's,
	// so on all of its migrations.
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	gdb := openRepository(t, dsn)
	outbox := repository.OutboxConfig{PaymentEventsTopic: "payment.events"}
	eur := func(amount string) domain.Money {
		m, err := domain.NewMoney(decimal.RequireFromString(amount), "EUR")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	lostCharge, err := domain.NewCharge(502, 42, eur("50.00"), "sandbox", "pi_lost")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := repository.NewTransactor(gdb, repository.WithOutbox(outbox)).AutoCommit().Charges.Claim(ctx, app.KeyClaim{
		Scope: app.IdempotencyScope{ClientID: "c", Key: "lost"}, CommandHash: "h-lost", Token: uuid.New(), LockFor: time.Minute}, lostCharge)
	if err != nil || !taken.Claimed || taken.Reserved || taken.Payment == nil || taken.Payment.ID != 2 {
		t.Fatalf("the charge's takeover of an earlier record: %+v, %v; want its payment 2", taken, err)
	}
	paidCharge, err := domain.NewCharge(501, 42, eur("100.00"), "sandbox", "pi_paid")
	if err != nil {
		t.Fatal(err)
	}
	refund, err := domain.NewRefund(domain.Payment{ID: 1, ClientID: "c", Charge: paidCharge, Status: domain.PaymentSucceeded}, eur("30.00"), "re_after")
	if err != nil {
		t.Fatal(err)
	}
	res, err := repository.NewTransactor(gdb, repository.WithOutbox(outbox)).AutoCommit().Refunds.Claim(ctx,
		app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "c", Key: "refund-after"}, CommandHash: "h-after", Token: uuid.New(), LockFor: time.Minute},
		refund)
	if err != nil || !res.Claimed || !res.Reserved || res.Refund == nil {
		t.Fatalf("a refund's claim after 00016: %+v, %v", res, err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record
		WHERE idempotency_key = 'refund-after' AND command = 'refund' AND refund_id = $1 AND payment_id = 1`, int64(res.Refund.ID)); got != 1 {
		t.Error("the refund's record does not point at its refund and its payment (00017's rule, written by the statement already)")
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM payment WHERE id = 1 AND refund_reserved = 50`); got != 1 {
		t.Error("the payment's refund total is not 20.00 + 30.00")
	}

	// Down: 00016 refuses while a refund is in progress (its record would
	// lose its recovery point), then drops the column and keeps the
	// records; 00015 the refunds and the totals. Then up again to the
	// latest.
	if _, err := p.DownTo(ctx, 15); err == nil || !strings.Contains(err.Error(), "refunds in progress") {
		t.Fatalf("down to 15 with a refund in progress: %v; want a refusal", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record WHERE refund_id IS NOT NULL`); got != 1 {
		t.Fatalf("after the refused down, %d records point at a refund, want 1", got)
	}
	run(`UPDATE idempotency_record SET status = 'COMPLETED', http_status = 201, response = '{}', lock_token = NULL, locked_until = NULL WHERE idempotency_key = 'refund-after'`)
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatalf("down to 15: %v", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'idempotency_record' AND column_name = 'refund_id'`); got != 0 {
		t.Error("refund_id is still there after 00016's down")
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record`); got != 4 {
		t.Errorf("%d records after 00016's down, want the 4", got)
	}
	run(`DELETE FROM idempotency_record WHERE command = 'refund'`) // 00013's down refuses them; 00014's does not look
	if _, err := p.DownTo(ctx, 14); err != nil {
		t.Fatalf("down to 14: %v", err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'refund'`); got != 0 {
		t.Error("the refund table is still there after 00015's down")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

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
	db, p, run := downTo(ctx, t, testdb.New(t), 16)
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

// downTo migrates the database at dsn down to version, and returns it, its
// goose provider, and run, which executes a statement or fails the test.
func downTo(ctx context.Context, t *testing.T, dsn string, version int64) (*sql.DB, *goose.Provider, func(q string, args ...any)) {
	t.Helper()
	db, p := openProvider(t, dsn)
	if _, err := p.DownTo(ctx, version); err != nil {
		t.Fatalf("down to %d: %v", version, err)
	}
	return db, p, func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// exec runs q and returns its error.
func exec(ctx context.Context, db *sql.DB, q string, args ...any) error {
	_, err := db.ExecContext(ctx, q, args...)
	return err
}

// count runs a SELECT count(*) ... and returns the number.
func count(ctx context.Context, t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// wantCode fails the test unless err is a PostgreSQL error with SQLSTATE
// code.
func wantCode(t *testing.T, what, code string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		t.Errorf("%s: %v, want SQLSTATE %s", what, err, code)
	}
}
