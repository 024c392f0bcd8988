package repository_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
)

// openRefunds opens a database of the test's own, and the refund
// statements over its pool.
func openRefunds(t testing.TB) (*gorm.DB, *repository.Refunds) {
	t.Helper()
	db, _ := openDB(t)
	return db, repository.NewRefunds(db)
}

// addPayment inserts a payment of client as it stands after its charge,
// and returns it.
func addPayment(t testing.TB, db *gorm.DB, client domain.ClientID, order int64, amount string, currency domain.Currency, status domain.PaymentStatus) domain.Payment {
	t.Helper()
	var id int64
	err := db.Raw(`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
		VALUES (?, ?, 42, 'sandbox', ?, ?, ?, ?) RETURNING id`,
		string(client), order, fmt.Sprintf("pi_%d", order), amount, string(currency), string(status)).Scan(&id).Error
	if err != nil {
		t.Fatal(err)
	}
	money, err := domain.NewMoney(decimal.RequireFromString(amount), currency)
	if err != nil {
		t.Fatal(err)
	}
	charge, err := domain.NewCharge(domain.OrderID(order), 42, money, "sandbox", domain.ExternalPaymentID(fmt.Sprintf("pi_%d", order)))
	if err != nil {
		t.Fatal(err)
	}
	return domain.Payment{ID: domain.PaymentID(id), ClientID: client, Charge: charge, Status: status}
}

// newRefund builds a refund of amount (in the payment's currency) from p.
func newRefund(t testing.TB, p domain.Payment, amount string, external string) domain.Refund {
	t.Helper()
	money, err := domain.NewMoney(decimal.RequireFromString(amount), p.Charge.Amount.Currency())
	if err != nil {
		t.Fatal(err)
	}
	r, err := domain.NewRefund(p, money, domain.ExternalRefundID(external))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// refundTotal is the payment's refund_reserved, and the sum of its refunds
// that count (PENDING and SUCCEEDED): the two must always agree.
func refundTotal(t testing.TB, db *gorm.DB, p domain.PaymentID) (reserved, counted string) {
	t.Helper()
	var row struct{ Reserved, Counted decimal.Decimal }
	err := db.Raw(`SELECT p.refund_reserved AS reserved,
		       (SELECT coalesce(sum(amount), 0) FROM refund r WHERE r.payment_id = p.id AND r.status IN ('PENDING', 'SUCCEEDED')) AS counted
		  FROM payment p WHERE p.id = ?`, int64(p)).Scan(&row).Error
	if err != nil {
		t.Fatal(err)
	}
	return row.Reserved.StringFixed(2), row.Counted.StringFixed(2)
}

// The race: 25 concurrent refunds of 10.00 on a 100.00 payment,
// each with its own external refund id. The database lets exactly 10
// through, the refund total is exactly the amount, and the other 15 are
// told "over the amount" (not an error: a check-then-act would let more
// than 10 through, and a statement that relied on the CHECK alone would
// fail the 15 with a constraint violation).
func TestConcurrentRefundsNeverExceedTheAmount(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	p := addPayment(t, db, "demo-client", 9001, "100.00", "RUB", domain.PaymentSucceeded)

	const n = 25
	results := make([]app.RefundReservation, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = refunds.ReserveRefund(context.Background(), "demo-client", newRefund(t, p, "10.00", fmt.Sprintf("re_%02d", i)))
		})
	}
	close(start)
	wg.Wait()

	kinds := map[app.RefundReservationKind]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("reservation %d: %v", i, errs[i])
		}
		kinds[results[i].Kind]++
		if k := results[i].Kind; k == app.RefundReserved && (results[i].Refund.ID == 0 || results[i].Refund.Status != domain.RefundPending) {
			t.Errorf("reservation %d: reserved %+v", i, results[i].Refund)
		}
	}
	if kinds[app.RefundReserved] != 10 || kinds[app.RefundOverTheAmount] != 15 || len(kinds) != 2 {
		t.Fatalf("reservations by kind: %v, want 10 reserved and 15 over the amount", kinds)
	}
	if reserved, counted := refundTotal(t, db, p.ID); reserved != "100.00" || counted != "100.00" {
		t.Fatalf("refund_reserved = %s, PENDING refunds sum to %s; want 100.00 both", reserved, counted)
	}
}

// Every answer of the reservation, one case per branch of the statement,
// and the tables after each.
func TestReserveRefundStatement(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	ctx := context.Background()
	succeeded := addPayment(t, db, "demo-client", 9101, "100.00", "RUB", domain.PaymentSucceeded)
	others := addPayment(t, db, "other-client", 9102, "100.00", "RUB", domain.PaymentSucceeded)
	pending := addPayment(t, db, "demo-client", 9103, "100.00", "RUB", domain.PaymentPending)
	declined := addPayment(t, db, "demo-client", 9104, "100.00", "RUB", domain.PaymentDeclined)
	failed := addPayment(t, db, "demo-client", 9105, "100.00", "RUB", domain.PaymentFailed)
	euro := addPayment(t, db, "demo-client", 9106, "100.00", "EUR", domain.PaymentSucceeded)

	first, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, succeeded, "30.00", "re_first"))
	if err != nil || first.Kind != app.RefundReserved {
		t.Fatalf("first reservation: %+v, %v", first, err)
	}
	missing := succeeded
	missing.ID = 999999
	inRUB := newRefund(t, euro, "10", "re_rub")
	inRUB.Amount, _ = domain.NewMoney(decimal.RequireFromString("10"), "RUB") // the payment is in EUR

	tests := []struct {
		name      string
		client    domain.ClientID
		refund    domain.Refund
		want      app.RefundReservationKind
		wantTotal string // the payment's refund_reserved after it
	}{
		{"another client's payment", "demo-client", newRefund(t, others, "10", "re_a"), app.RefundPaymentNotFound, "0.00"},
		{"no such payment", "demo-client", newRefund(t, missing, "10", "re_b"), app.RefundPaymentNotFound, ""},
		{"PENDING payment", "demo-client", newRefund(t, pending, "10", "re_c"), app.RefundPaymentNotRefundable, "0.00"},
		{"DECLINED payment", "demo-client", newRefund(t, declined, "10", "re_d"), app.RefundPaymentNotRefundable, "0.00"},
		{"FAILED payment", "demo-client", newRefund(t, failed, "10", "re_e"), app.RefundPaymentNotRefundable, "0.00"},
		{"other currency", "demo-client", inRUB, app.RefundPaymentNotRefundable, "0.00"},
		{"the same external refund again", "demo-client", newRefund(t, succeeded, "30", "re_first"), app.RefundExternalRefundExists, "30.00"},
		{"the same external refund, other amount", "demo-client", newRefund(t, succeeded, "5", "re_first"), app.RefundExternalRefundExists, "30.00"},
		{"the same external refund, by another client", "other-client", newRefund(t, others, "5", "re_first"), app.RefundExternalRefundExists, "0.00"},
		{"over the amount", "demo-client", newRefund(t, succeeded, "70.01", "re_over"), app.RefundOverTheAmount, "30.00"},
		{"exactly the rest", "demo-client", newRefund(t, succeeded, "70.00", "re_rest"), app.RefundReserved, "100.00"},
		{"the same external refund when nothing is left", "demo-client", newRefund(t, succeeded, "30", "re_first"), app.RefundExternalRefundExists, "100.00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rowsBefore := countRows(t, db, `SELECT count(*) FROM refund`)
			res, err := refunds.ReserveRefund(ctx, tc.client, tc.refund)
			if err != nil {
				t.Fatal(err)
			}
			if res.Kind != tc.want {
				t.Fatalf("kind = %v, want %v (%+v)", res.Kind, tc.want, res)
			}
			if tc.wantTotal != "" {
				if reserved, counted := refundTotal(t, db, tc.refund.PaymentID); reserved != tc.wantTotal || counted != tc.wantTotal {
					t.Fatalf("refund_reserved = %s, counted refunds %s; want %s", reserved, counted, tc.wantTotal)
				}
			}
			wantRows := rowsBefore
			if tc.want == app.RefundReserved {
				wantRows++
			}
			if got := countRows(t, db, `SELECT count(*) FROM refund`); got != wantRows {
				t.Fatalf("%d refund rows, want %d", got, wantRows)
			}
			switch tc.want {
			case app.RefundExternalRefundExists:
				// The existing refund, as it was recorded: the caller tells a
				// retry of it from a conflict with IsSameRefund and ClientID.
				if res.Refund.ID != first.Refund.ID || !res.Refund.IsSameRefund(first.Refund) || res.ClientID != "demo-client" {
					t.Fatalf("existing refund = %+v of %s, want %+v of demo-client", res.Refund, res.ClientID, first.Refund)
				}
			case app.RefundReserved:
				if !res.Refund.IsSameRefund(tc.refund) || res.Refund.Status != domain.RefundPending || res.ClientID != tc.client {
					t.Fatalf("reserved %+v of %s, want %+v", res.Refund, res.ClientID, tc.refund)
				}
			}
		})
	}
}

// The same external refund, asked for at once on two payments: one row,
// and only its payment's total counts it. The second insert waits for the
// first and then does nothing; nothing may stay reserved for it.
func TestConcurrentReservationsOfOneExternalRefund(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	const rounds = 20
	for round := range rounds {
		a := addPayment(t, db, "demo-client", int64(9200+2*round), "100.00", "RUB", domain.PaymentSucceeded)
		b := addPayment(t, db, "demo-client", int64(9201+2*round), "100.00", "RUB", domain.PaymentSucceeded)
		external := fmt.Sprintf("re_shared_%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]app.RefundReservation, 4)
		errs := make([]error, 4)
		for i, p := range []domain.Payment{a, b, a, b} {
			wg.Go(func() {
				<-start
				results[i], errs[i] = refunds.ReserveRefund(context.Background(), "demo-client", newRefund(t, p, "10.00", external))
			})
		}
		close(start)
		wg.Wait()
		reservedOnce := 0
		for i := range results {
			if errs[i] != nil {
				t.Fatalf("round %d, reservation %d: %v", round, i, errs[i])
			}
			switch results[i].Kind {
			case app.RefundReserved:
				reservedOnce++
			case app.RefundExternalRefundExists:
				if results[i].Refund.ID == 0 || results[i].Refund.ExternalRefundID != domain.ExternalRefundID(external) {
					t.Fatalf("round %d: existing refund %+v", round, results[i].Refund)
				}
			default:
				t.Fatalf("round %d, reservation %d: %+v", round, i, results[i])
			}
		}
		if reservedOnce != 1 {
			t.Fatalf("round %d: %d reservations, want 1", round, reservedOnce)
		}
		for _, p := range []domain.Payment{a, b} {
			if reserved, counted := refundTotal(t, db, p.ID); reserved != counted {
				t.Fatalf("round %d, payment %d: refund_reserved %s, but its refunds sum to %s", round, p.ID, reserved, counted)
			}
		}
	}
}

// Settling: a refund the provider declined or refused gives its amount
// back, so another refund fits; a succeeded one keeps it; a refund is
// settled once.
func TestSettleRefund(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	ctx := context.Background()
	p := addPayment(t, db, "demo-client", 9301, "100.00", "RUB", domain.PaymentSucceeded)
	reserve := func(amount, external string) app.RefundReservation {
		t.Helper()
		res, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, p, amount, external))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	status := func(id domain.RefundID) string {
		t.Helper()
		var s string
		if err := db.Raw(`SELECT status FROM refund WHERE id = ?`, int64(id)).Scan(&s).Error; err != nil {
			t.Fatal(err)
		}
		return s
	}

	all := reserve("100.00", "re_all")
	if all.Kind != app.RefundReserved {
		t.Fatalf("the whole amount: %+v", all)
	}
	if res := reserve("10.00", "re_ten"); res.Kind != app.RefundOverTheAmount {
		t.Fatalf("10.00 more while 100.00 is reserved: %+v, want over the amount", res)
	}

	tests := []struct {
		name      string
		status    domain.RefundStatus
		wantTotal string
	}{
		{"declined gives the amount back", domain.RefundDeclined, "0.00"},
		{"failed gives the amount back", domain.RefundFailed, "0.00"},
		{"succeeded keeps it", domain.RefundSucceeded, "100.00"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := all.Refund.ID
			if i > 0 { // the first case settles re_all; the others a new refund of everything
				res := reserve("100.00", fmt.Sprintf("re_all_%d", i))
				if res.Kind != app.RefundReserved {
					t.Fatalf("reserve again: %+v", res)
				}
				id = res.Refund.ID
			}
			if err := refunds.SettleRefund(ctx, id, tc.status); err != nil {
				t.Fatal(err)
			}
			if got := status(id); got != string(tc.status) {
				t.Fatalf("status = %s, want %s", got, tc.status)
			}
			if reserved, counted := refundTotal(t, db, p.ID); reserved != tc.wantTotal || counted != tc.wantTotal {
				t.Fatalf("refund_reserved = %s, counted %s; want %s", reserved, counted, tc.wantTotal)
			}
			// Once settled, never again: not even to the same status.
			if err := refunds.SettleRefund(ctx, id, domain.RefundDeclined); err == nil {
				t.Fatal("a settled refund was settled again")
			}
			if reserved, _ := refundTotal(t, db, p.ID); reserved != tc.wantTotal {
				t.Fatalf("a second settling changed refund_reserved to %s", reserved)
			}
		})
	}
	// Everything is refunded now: the declined amount was given back and
	// taken again by the succeeded refund.
	if res := reserve("0.01", "re_cent"); res.Kind != app.RefundOverTheAmount {
		t.Fatalf("a cent more than the amount: %+v", res)
	}
	if err := refunds.SettleRefund(ctx, all.Refund.ID, domain.RefundPending); err == nil {
		t.Fatal("settled to PENDING")
	}
	if err := refunds.SettleRefund(ctx, 999999, domain.RefundDeclined); err == nil {
		t.Fatal("settled a refund that does not exist")
	}
}

// After a decline gives its amount back, a refund that did not fit does.
func TestDeclinedRefundMakesRoomForAnother(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	ctx := context.Background()
	p := addPayment(t, db, "demo-client", 9401, "100.00", "RUB", domain.PaymentSucceeded)
	big, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, p, "95.00", "re_big"))
	if err != nil || big.Kind != app.RefundReserved {
		t.Fatalf("%+v, %v", big, err)
	}
	small := newRefund(t, p, "10.00", "re_small")
	if res, err := refunds.ReserveRefund(ctx, "demo-client", small); err != nil || res.Kind != app.RefundOverTheAmount {
		t.Fatalf("before the decline: %+v, %v; want over the amount", res, err)
	}
	if err := refunds.SettleRefund(ctx, big.Refund.ID, domain.RefundDeclined); err != nil {
		t.Fatal(err)
	}
	if res, err := refunds.ReserveRefund(ctx, "demo-client", small); err != nil || res.Kind != app.RefundReserved || !res.RefundReserved.Equal(decimal.RequireFromString("10")) {
		t.Fatalf("after the decline: %+v, %v; want reserved, total 10", res, err)
	}
}

// The CHECKs are the backstop: no statement, however wrong, takes the
// refund total below zero or beyond the amount, or writes a refund the
// domain could not build.
func TestRefundChecksAreTheBackstop(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	p := addPayment(t, db, "demo-client", 9501, "100.00", "RUB", domain.PaymentSucceeded)
	insert := `INSERT INTO refund (payment_id, client_id, payment_provider, external_refund_id, amount, currency, status)
		VALUES (?, 'demo-client', 'sandbox', ?, ?, 'RUB', ?)`
	tests := []struct {
		name, sql  string
		args       []any
		constraint string // "": allowed
	}{
		{"refund total beyond the amount", `UPDATE payment SET refund_reserved = 100.01 WHERE id = ?`, []any{int64(p.ID)}, "payment_refund_reserved_check"},
		{"refund total below zero", `UPDATE payment SET refund_reserved = -0.01 WHERE id = ?`, []any{int64(p.ID)}, "payment_refund_reserved_check"},
		{"refund total of the whole amount", `UPDATE payment SET refund_reserved = 100.00 WHERE id = ?`, []any{int64(p.ID)}, ""},
		{"external refund id with a newline", insert, []any{int64(p.ID), "re\n1", "1", "PENDING"}, "refund_external_refund_id_check"},
		{"external refund id of 129 characters", insert, []any{int64(p.ID), fmt.Sprintf("%0129d", 0), "1", "PENDING"}, "refund_external_refund_id_check"},
		{"amount zero", insert, []any{int64(p.ID), "re_zero", "0", "PENDING"}, "refund_amount_check"},
		{"status of another vocabulary", insert, []any{int64(p.ID), "re_status", "1", "REFUNDED"}, "refund_status_check"},
		{"printable external refund id of 128 characters", insert, []any{int64(p.ID), fmt.Sprintf("%0128d", 0), "1", "PENDING"}, ""},
	}
	for _, tc := range tests {
		err := db.Exec(tc.sql, tc.args...).Error
		var pgErr *pgconn.PgError
		switch {
		case tc.constraint == "" && err != nil:
			t.Errorf("%s: %v, want it allowed", tc.name, err)
		case tc.constraint != "" && (!errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != tc.constraint):
			t.Errorf("%s: err = %v, want the CHECK %s to refuse it", tc.name, err, tc.constraint)
		}
	}
}

// Releasing gives a PENDING refund's reservation back when the provider did
// not act on it: the row goes, its amount stops counting, and a retry
// reserves the same external refund anew. A decided refund is never
// released.
func TestReleaseRefund(t *testing.T) {
	t.Parallel()
	db, refunds := openRefunds(t)
	ctx := context.Background()
	p := addPayment(t, db, "demo-client", 9601, "100.00", "RUB", domain.PaymentSucceeded)
	all := newRefund(t, p, "100.00", "re_all")
	first, err := refunds.ReserveRefund(ctx, "demo-client", all)
	if err != nil || first.Kind != app.RefundReserved {
		t.Fatalf("reserve: %+v, %v", first, err)
	}
	if err := refunds.ReleaseRefund(ctx, first.Refund.ID); err != nil {
		t.Fatal(err)
	}
	if reserved, counted := refundTotal(t, db, p.ID); reserved != "0.00" || counted != "0.00" {
		t.Fatalf("after the release: refund_reserved %s, counted %s; want 0.00", reserved, counted)
	}
	if n := countRows(t, db, `SELECT count(*) FROM refund WHERE id = ?`, int64(first.Refund.ID)); n != 0 {
		t.Fatal("the released refund's row is still there")
	}
	again, err := refunds.ReserveRefund(ctx, "demo-client", all)
	if err != nil || again.Kind != app.RefundReserved || again.Refund.ID == first.Refund.ID {
		t.Fatalf("the retry: %+v, %v; want a new reservation", again, err)
	}
	if err := refunds.ReleaseRefund(ctx, first.Refund.ID); err == nil {
		t.Fatal("a refund released twice")
	}
	if err := refunds.SettleRefund(ctx, again.Refund.ID, domain.RefundSucceeded); err != nil {
		t.Fatal(err)
	}
	if err := refunds.ReleaseRefund(ctx, again.Refund.ID); err == nil {
		t.Fatal("a succeeded refund was released")
	}
	if reserved, counted := refundTotal(t, db, p.ID); reserved != "100.00" || counted != "100.00" {
		t.Fatalf("after refusing to release a succeeded refund: refund_reserved %s, counted %s; want 100.00", reserved, counted)
	}
}

// A reservation that waited for the payment's lock while another
// statement gave an amount back (a release after the provider refused, or
// a decline) fits in what was given back. Under READ COMMITTED the
// reservation's UPDATE first builds the payment's new row from the row its
// snapshot saw, from before the give-back, and PostgreSQL checks the CHECK
// on that row before it notices the newer one: a total computed from the
// snapshot's row failed the CHECK with a 500 where the refund fitted (the
// fault suite's seeded rounds found it: seed 20261202, round 36). The
// total is computed from the row the reservation locked.
func TestReservationAfterAWaitedGiveBack(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		giveBack func(r *repository.Refunds, id domain.RefundID) error
	}{
		{"release", func(r *repository.Refunds, id domain.RefundID) error {
			return r.ReleaseRefund(context.Background(), id)
		}},
		{"decline", func(r *repository.Refunds, id domain.RefundID) error {
			return r.SettleRefund(context.Background(), id, domain.RefundDeclined)
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, refunds := openRefunds(t)
			store := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: "payment.events"})).AutoCommit().Refunds
			p := addPayment(t, db, "demo-client", int64(9601+i), "100.00", "RUB", domain.PaymentSucceeded)
			big, err := refunds.ReserveRefund(ctx, "demo-client", newRefund(t, p, "95.00", "re_given_back"))
			if err != nil || big.Kind != app.RefundReserved {
				t.Fatalf("%+v, %v", big, err)
			}

			// The give-back holds the payment's lock, uncommitted, while the
			// reservation starts and waits for it.
			tx := db.Begin()
			if err := tc.giveBack(repository.NewRefunds(tx), big.Refund.ID); err != nil {
				tx.Rollback()
				t.Fatal(err)
			}
			type result struct {
				res app.RefundClaimed
				err error
			}
			done := make(chan result, 1)
			claim := app.KeyClaim{Scope: app.IdempotencyScope{ClientID: "demo-client", Key: "after-give-back"}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}
			want := newRefund(t, p, "10.00", "re_after_give_back")
			go func() {
				res, err := store.Claim(ctx, claim, want)
				done <- result{res, err}
			}()
			for waiting := int64(0); waiting == 0; time.Sleep(5 * time.Millisecond) {
				if err := db.Raw(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%refund_target%'`).Scan(&waiting).Error; err != nil {
					tx.Rollback()
					t.Fatal(err)
				}
			}
			if err := tx.Commit().Error; err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || !r.res.Claimed || !r.res.Reserved {
				t.Fatalf("the reservation after the give-back: %+v, %v; want claimed and reserved", r.res, r.err)
			}
			if reserved, counted := refundTotal(t, db, p.ID); reserved != "10.00" || counted != "10.00" {
				t.Fatalf("refund total %s, counted %s; want 10.00", reserved, counted)
			}
		})
	}
}
