package jobs_test

import (
	"context"
	"net/http"
	"testing"
)

// A payment that would stay stuck: the first provider call never charged
// and its answer was lost; every later request is refused for good. A
// completer that only asks again would do so on every run and keep the
// payment PENDING for ever. It looks the charge up by its provider key,
// finds none, waits out the sandbox's request bound, finds none again,
// and ends the payment FAILED on its first run: one event, the key's final
// answer stored, the order free.
func TestCompleterEndsARefusedChargeWithNoChargeAtTheProvider(t *testing.T) {
	t.Parallel()
	lost := loseTheAnswer(t, "busyrefuse_stuck", "stuck-1")
	dsn, db, sb, calls, charge := lost.dsn, lost.db, lost.provider, lost.calls, lost.charge
	exec(t, db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes' WHERE status = 'IN_PROGRESS'`)

	r := newReplica(t, dsn, replicaOptions{charge: charge})
	if err := r.jobs.CompleteAbandonedCharges(context.Background()); err != nil {
		t.Fatal(err)
	}
	var httpStatus int
	var paymentStatus string
	err := db.QueryRow(context.Background(), `SELECT r.http_status, p.status FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		WHERE r.idempotency_key = 'stuck-1' AND r.status = 'COMPLETED'`).Scan(&httpStatus, &paymentStatus)
	if err != nil || httpStatus != http.StatusPaymentRequired || paymentStatus != "FAILED" {
		t.Fatalf("after one completer run: %d %s %v, want COMPLETED 402 and FAILED", httpStatus, paymentStatus, err)
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentFailed.v1'`); n != 1 {
		t.Fatalf("PaymentFailed.v1 events = %d, want 1", n)
	}
	if got := r.counter(t, "payment_abandoned_charges_total", map[string]string{"outcome": "completed"}); got != 1 {
		t.Fatalf("abandoned charges completed = %v, want 1", got)
	}
	if got := r.counterOf(t, calls, "lookup_none"); got != 2 {
		t.Fatalf("lookups that found no charge = %v, want 2 (before and after the bound)", got)
	}
	if n := len(sb.Ledger().Charges); n != 0 {
		t.Fatalf("charges at the provider = %d, want 0", n)
	}
}
