package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

// refundStandIn is a second command as the completer sees it: it resumes
// what it has a reservation for and says ErrNothingReserved otherwise.
type refundStandIn struct {
	mu      sync.Mutex
	resumed []string
}

func (r *refundStandIn) Resume(_ context.Context, rec app.IdempotencyRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resumed = append(r.resumed, rec.Scope.Key)
	if rec.RecoveryPoint == nil {
		return app.ErrNothingReserved
	}
	return nil
}

// The completer is one for every command on the core: each abandoned record
// goes to the Resume of its own command, a command with nothing reserved
// has its key given back by the completer (for that command only), and a
// command it was not given is never listed.
func TestCompleterHandsEachRecordToItsOwnCommand(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	r := newReplica(t, dsn, replicaOptions{})
	now := time.Now()
	expired := now.Add(-2 * time.Minute)
	for _, rec := range []record{
		{key: "refund-reserved", command: "refund", status: app.RecordInProgress, lockedUntil: expired, withPayment: true},
		{key: "refund-nothing", command: "refund", status: app.RecordInProgress, lockedUntil: expired},
		{key: "capture-nothing", command: "capture", status: app.RecordInProgress, lockedUntil: expired},
	} {
		insertRecord(t, db, now, rec)
	}
	refund := &refundStandIn{}
	completer := app.NewCompleteAbandonedCharges(repository.NewRetention(r.db),
		map[app.CommandName]app.Resumable{"refund": refund}, time.Minute, 100, discardLogger)

	res, err := completer.Handle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != 1 || res.Released != 1 || res.Failed != 0 {
		t.Fatalf("result = %+v, want one completed and one released", res)
	}
	if len(refund.resumed) != 2 {
		t.Fatalf("the refund resumed %v, want its two records", refund.resumed)
	}
	for key, want := range map[string]int{"refund-reserved": 1, "refund-nothing": 0, "capture-nothing": 1} {
		if got := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, key); got != want {
			t.Errorf("%s: %d records, want %d", key, got, want)
		}
	}
}

// payoutStandIn is a command added after the shared code was written, as
// the completer sees it: a name no shared statement spells out, and a
// recovery point in a table only it knows.
type payoutStandIn struct {
	mu      sync.Mutex
	resumed map[string]*int64 // key -> the recovery point it was handed
}

func (p *payoutStandIn) Resume(_ context.Context, rec app.IdempotencyRecord) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumed[rec.Scope.Key] = rec.RecoveryPoint
	if rec.RecoveryPoint == nil {
		return app.ErrNothingReserved
	}
	return nil
}

// A fourth command needs nothing of the jobs but its name: its claim with
// a recovery point is handed to its own Resume with that recovery point,
// and is never released, by the completer's release nor by the purge, while
// it is in progress, however old; its claim with none is given back. Beside
// the previous release its record names a payment too (migration 00024's
// CHECK); after the contract step (the CHECK and payment_id gone) the
// recovery point alone keeps it, which a release guard that named each
// command's own column (payment_id, refund_id, transition_id) did not.
func TestAFourthCommandIsKnownByItsRecoveryPoint(t *testing.T) {
	t.Parallel()
	const payout = app.CommandName("payout")
	for _, schema := range []struct {
		name string
		// alter brings the schema to the state; paid: the record names a
		// payment beside its recovery point.
		alter string
		paid  bool
	}{
		{"beside the previous release", "", true},
		{"after the contract step", `ALTER TABLE idempotency_record DROP CONSTRAINT idempotency_record_recovery_point_check`, false},
	} {
		t.Run(schema.name, func(t *testing.T) {
			t.Parallel()
			dsn := testdb.New(t)
			db := pool(t, dsn)
			if schema.alter != "" {
				exec(t, db, schema.alter)
			}
			exec(t, db, `INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
				VALUES ('c', 1, 1, 'sandbox', 'pi_1', 10, 'RUB', 'SUCCEEDED')`)
			// Past the TTL, its lock expired beyond the completer's grace.
			insert := func(key string, recoveryPoint *int64, paid bool) {
				t.Helper()
				exec(t, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, recovery_point, payment_id, lock_token, locked_until, created_at)
					VALUES ('c', $1, 'payout', 'h', 'IN_PROGRESS', $2, (SELECT id FROM payment WHERE $3), gen_random_uuid(),
					        now() - interval '2 minutes', now() - interval '100 hours')`, key, recoveryPoint, paid)
			}
			reserved := int64(7)
			insert("payout-reserved", &reserved, schema.paid)
			insert("payout-nothing", nil, false)

			r := newReplica(t, dsn, replicaOptions{})
			retention := repository.NewRetention(r.db)
			if released, err := retention.ReleaseAbandoned(context.Background(), []app.CommandName{payout},
				app.IdempotencyScope{ClientID: "c", Key: "payout-reserved"}); err != nil || released {
				t.Fatalf("the completer's release of a claim with a recovery point: released %v, %v", released, err)
			}
			if err := r.jobs.PurgeExpired(context.Background()); err != nil {
				t.Fatal(err)
			}
			standIn := &payoutStandIn{resumed: map[string]*int64{}}
			completer := app.NewCompleteAbandonedCharges(retention, map[app.CommandName]app.Resumable{payout: standIn}, time.Minute, 100, discardLogger)
			res, err := completer.Handle(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != 1 || res.Released != 1 || res.Failed != 0 {
				t.Errorf("result = %+v, want one completed and one released", res)
			}
			if got, ok := standIn.resumed["payout-reserved"]; !ok || got == nil || *got != reserved {
				t.Errorf("the reserved claim was handed the recovery point %v (listed %v), want %d", got, ok, reserved)
			}
			if got, ok := standIn.resumed["payout-nothing"]; !ok || got != nil {
				t.Errorf("the claim that reserved nothing was handed %v (listed %v), want none", got, ok)
			}
			for key, want := range map[string]int{"payout-reserved": 1, "payout-nothing": 0} {
				if got := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, key); got != want {
					t.Errorf("%s: %d records, want %d", key, got, want)
				}
			}
		})
	}
}
