package migrations_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// Migration 00024 over what the releases before it wrote, and beside the
// previous release: every claim in progress gets its command's own column
// as its recovery point (a refund's its refund, not the payment it names
// too), a completed record none; a claim in progress that names a payment
// without a recovery point is refused unless it is a charge's (a build
// before 00024 writing a refund), and so is one with a recovery point and
// no payment (a command the previous release's jobs would release); the
// previous release's charge's claim, written after the backfill with its
// payment in payment_id alone, is listed by the completer with that
// payment as its recovery point, never released, and a charge's takeover
// makes the payment its recovery point. Down refuses while a claim in
// progress has a recovery point that no older column names, and brings
// 00023's four indexes back; up again.
func TestOneRecoveryPointMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := testdb.New(t)
	db, p, run := downTo(ctx, t, dsn, 23)

	// What the builds before 00024 wrote.
	run(`INSERT INTO payment (id, client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, capture_method, refund_reserved)
		OVERRIDING SYSTEM VALUE VALUES
		(1, 'c', 1, 42, 'sandbox', 'pi_1', 100, 'EUR', 'SUCCEEDED', 'automatic', 30),
		(2, 'c', 2, 42, 'sandbox', 'pi_2', 10, 'EUR', 'PENDING', 'automatic', 0),
		(3, 'c', 3, 42, 'sandbox', 'pi_3', 10, 'EUR', 'PENDING', 'automatic', 0),
		(4, 'c', 4, 42, 'sandbox', 'pi_4', 10, 'EUR', 'AUTHORIZED', 'manual', 0)`)
	run(`SELECT setval(pg_get_serial_sequence('payment', 'id'), 4)`)
	run(`INSERT INTO refund (id, payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		OVERRIDING SYSTEM VALUE VALUES (5, 1, 'c', 'sandbox', 're_5', 20, 'EUR', 'PENDING'), (6, 1, 'c', 'sandbox', 're_6', 10, 'EUR', 'SUCCEEDED')`)
	run(`INSERT INTO payment_transition (id, payment_id, client_id, kind, provider_key, status)
		OVERRIDING SYSTEM VALUE VALUES (7, 4, 'c', 'void', 'void_4', 'PENDING')`)
	inProgress := `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, payment_id, refund_id, transition_id)
		VALUES ('c', $1, $2, 'h', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 hour', $3, $4, $5)`
	run(inProgress, "charge", "charge", 2, nil, nil)
	run(inProgress, "refund", "refund", 1, 5, nil)
	run(inProgress, "void", "void", 4, nil, 7)
	run(inProgress, "nothing", "refund", nil, nil, nil)
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, payment_id, refund_id)
		VALUES ('c', 'refund-done', 'refund', 'h', 'COMPLETED', '{}', 201, 1, 6)`)

	if _, err := p.UpTo(ctx, 24); err != nil {
		t.Fatalf("up to 24: %v", err)
	}
	for key, want := range map[string]string{"charge": "2", "refund": "5", "void": "7", "nothing": "", "refund-done": ""} {
		var got string
		if err := db.QueryRowContext(ctx, `SELECT coalesce(recovery_point::text, '') FROM idempotency_record WHERE idempotency_key = $1`, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("after the backfill %s's recovery point is %q, want %q", key, got, want)
		}
	}

	wantCode(t, "a refund's claim with no recovery point (a build before 00024)", "23514", exec(ctx, db, inProgress, "refund-before", "refund", 1, 5, nil))
	wantCode(t, "a claim with a recovery point and no payment, which the previous release's jobs would release", "23514",
		exec(ctx, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point)
			VALUES ('c', 'payout', 'payout', 'h', 'IN_PROGRESS', gen_random_uuid(), now(), 9)`))
	// The previous release's claim, as its statement writes it after the
	// backfill: no command, no recovery point, its payment in payment_id.
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, lock_token, locked_until, payment_id)
		VALUES ('c', 'previous', 'h-previous', 'IN_PROGRESS', gen_random_uuid(), now() - interval '1 hour', 3)`)

	// The repository's statements are this tree's: they write the
	// columns of the migrations after 00024 too.
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	gdb := openRepository(t, dsn)
	retention := repository.NewRetention(gdb)
	listed, err := retention.ListAbandoned(ctx, []app.CommandName{app.CommandCharge}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	points := map[string]int64{}
	for _, rec := range listed {
		if rec.RecoveryPoint != nil {
			points[rec.Scope.Key] = *rec.RecoveryPoint
		}
	}
	if points["previous"] != 3 || points["charge"] != 2 {
		t.Errorf("the completer's list gives the recovery points %v, want the previous release's claim's payment 3 and the charge's 2", points)
	}
	if released, err := retention.ReleaseAbandoned(ctx, []app.CommandName{app.CommandCharge}, app.IdempotencyScope{ClientID: "c", Key: "previous"}); err != nil || released {
		t.Errorf("the completer's release of the previous release's claim with a payment: released %v, %v", released, err)
	}

	// A charge's takeover of the previous release's claim.
	eur, err := domain.NewMoney(decimal.RequireFromString("10"), "EUR")
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(3, 42, eur, "sandbox", "pi_3")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := repository.NewTransactor(gdb).AutoCommit().Charges.Claim(ctx, app.KeyClaim{
		Scope: app.IdempotencyScope{ClientID: "c", Key: "previous"}, CommandHash: "h-previous", Token: uuid.New(), LockFor: time.Minute}, charge)
	if err != nil || !taken.Claimed || taken.Reserved || taken.Payment == nil || taken.Payment.ID != 3 {
		t.Fatalf("the charge's takeover of the previous release's claim: %+v, %v; want its payment 3", taken, err)
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'previous' AND recovery_point = 3 AND payment_id = 3`); got != 1 {
		t.Error("after the takeover the previous release's claim does not hold its payment as its recovery point")
	}

	// A command added since: its recovery point is in no older column.
	run(`INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, lock_token, locked_until, recovery_point, payment_id)
		VALUES ('c', 'payout', 'payout', 'h', 'IN_PROGRESS', gen_random_uuid(), now(), 9, 1)`)
	if _, err := p.DownTo(ctx, 23); err == nil || !strings.Contains(err.Error(), "no older column names") {
		t.Fatalf("down to 23 with a payout's claim in progress: %v; want a refusal", err)
	}
	run(`UPDATE idempotency_record SET status = 'COMPLETED', http_status = 201, response = '{}', lock_token = NULL, locked_until = NULL WHERE idempotency_key = 'payout'`)
	if _, err := p.DownTo(ctx, 23); err != nil {
		t.Fatalf("down to 23: %v", err)
	}
	for _, index := range []string{"ix_idempotency_record_abandoned", "ix_idempotency_record_payment_in_progress",
		"ix_idempotency_record_refund_in_progress", "ix_idempotency_record_transition_in_progress"} {
		if got := count(ctx, t, db, `SELECT count(*) FROM pg_index WHERE indexrelid = to_regclass($1) AND indisvalid`, index); got != 1 {
			t.Errorf("down to 23: %s is not back", index)
		}
	}
	if got := count(ctx, t, db, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'idempotency_record' AND column_name = 'recovery_point'`); got != 0 {
		t.Error("recovery_point is still there after 00024's down")
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
