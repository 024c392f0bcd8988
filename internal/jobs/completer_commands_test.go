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
	if rec.PaymentID == nil {
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
