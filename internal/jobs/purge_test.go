package jobs_test

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

type record struct {
	key         string
	command     app.CommandName // "": app.CommandCharge
	status      app.RecordStatus
	age         time.Duration // created_at = now - age
	lockedUntil time.Time     // IN_PROGRESS only; compared with the database clock
	// withPayment: the record's reservation is a payment of its own, its
	// recovery point, named in payment_id too, as the claims name it
	// (migration 00024).
	withPayment bool
	kept        bool
}

func insertRecord(t testing.TB, db *pgxpool.Pool, now time.Time, r record) {
	t.Helper()
	var paymentID, recoveryPoint *int64
	if r.withPayment {
		// Each payment its own order: an order has one live payment at most
		// (the third layer, the partial unique index on order_id over live
		// payments).
		var id int64
		err := db.QueryRow(context.Background(), `
			INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			SELECT 'c', coalesce(max(order_id), 100000) + 1, 1, 'sandbox', $1, 10, 'RUB', 'PENDING' FROM payment
			RETURNING id`, "pi_"+r.key).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		paymentID, recoveryPoint = &id, &id
	}
	command := cmp.Or(r.command, app.CommandCharge)
	if r.status == app.RecordCompleted {
		exec(t, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, payment_id, recovery_point, created_at)
			VALUES ('c', $1, $2, 'h', 'COMPLETED', '{}', 201, $3, $4, $5)`, r.key, command, paymentID, recoveryPoint, now.Add(-r.age))
		return
	}
	exec(t, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, payment_id, recovery_point, lock_token, locked_until, created_at)
		VALUES ('c', $1, $2, 'h', 'IN_PROGRESS', $3, $4, $5, $6, $7)`, r.key, command, paymentID, recoveryPoint, uuid.New(), r.lockedUntil, now.Add(-r.age))
}

// withSearchPath puts schema first on the connection's search_path.
func withSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		return dsn + " search_path=" + schema + ",public"
	}
	q := u.Query()
	q.Set("search_path", schema+",public")
	u.RawQuery = q.Encode()
	return u.String()
}

// R-DIST-IDEM-5 at the edges: with the clock held still, a record a minute
// inside the TTL survives and one a minute past it goes; an old record whose
// lock is live, or whose abandoned charge the completer still has to finish,
// survives; the same holds for processed events and published outbox rows,
// and an unpublished outbox row is never deleted.
func TestPurgeDeletesExactlyWhatIsPastItsRetention(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{24 * time.Hour, 72 * time.Hour} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			dsn := testdb.New(t)
			db := pool(t, dsn)
			// The outbox table arrives with another migration. The test
			// makes one with the announced shape (id identity, published_at
			// NULL until published) in a schema of its own that comes first
			// on the search path, so it holds whatever the real table grows.
			exec(t, db, `CREATE SCHEMA outbox_fixture;
				CREATE TABLE outbox_fixture.outbox_event (
					id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
					published_at timestamptz NULL)`)
			dsn = withSearchPath(t, dsn, "outbox_fixture")
			db = pool(t, dsn)

			now := time.Now().UTC().Truncate(time.Microsecond)
			policy := app.RetentionPolicy{IdempotencyTTL: ttl, ProcessedEvents: 7 * 24 * time.Hour, PublishedOutbox: 24 * time.Hour}
			// A batch of 2 makes each table take several statements.
			r := newReplica(t, dsn, replicaOptions{policy: policy, batchSize: 2, now: func() time.Time { return now }})

			live, expired := time.Now().Add(time.Hour), time.Now().Add(-time.Minute)
			records := []record{
				{key: "completed-inside-ttl", status: app.RecordCompleted, age: ttl - time.Minute, kept: true},
				{key: "completed-past-ttl", status: app.RecordCompleted, age: ttl + time.Minute},
				{key: "completed-long-past-ttl", status: app.RecordCompleted, age: 10 * ttl},
				{key: "completed-with-payment-past-ttl", status: app.RecordCompleted, age: ttl + time.Minute, withPayment: true},
				{key: "live-lock-past-ttl", status: app.RecordInProgress, age: ttl + 24*time.Hour, lockedUntil: live, kept: true},
				{key: "live-lock-with-payment-past-ttl", status: app.RecordInProgress, age: ttl + time.Minute, lockedUntil: live, withPayment: true, kept: true},
				{key: "abandoned-claim-past-ttl", status: app.RecordInProgress, age: ttl + time.Minute, lockedUntil: expired},
				{key: "abandoned-charge-past-ttl", status: app.RecordInProgress, age: ttl + time.Minute, lockedUntil: expired, withPayment: true, kept: true},
				{key: "abandoned-claim-inside-ttl", status: app.RecordInProgress, age: ttl - time.Minute, lockedUntil: expired, kept: true},
			}
			for _, rec := range records {
				insertRecord(t, db, now, rec)
			}
			week := 7 * 24 * time.Hour
			exec(t, db, `INSERT INTO processed_event (event_id, consumer_name, processed_at) VALUES
				('00000000-0000-7000-8000-000000000001', 'c', $1),
				('00000000-0000-7000-8000-000000000002', 'c', $2),
				('00000000-0000-7000-8000-000000000003', 'c', $3),
				-- another consumer's old row of an event 'c' processed recently
				('00000000-0000-7000-8000-000000000001', 'rebuild', $3)`,
				now.Add(-week+time.Minute), now.Add(-week-time.Minute), now.Add(-30*week))
			exec(t, db, `INSERT INTO outbox_event (published_at) VALUES ($1), ($2), (NULL)`,
				now.Add(-24*time.Hour+time.Minute), now.Add(-24*time.Hour-time.Minute))
			exec(t, db, `UPDATE outbox_event SET published_at = NULL WHERE id = 3`)

			if err := r.jobs.PurgeExpired(context.Background()); err != nil {
				t.Fatal(err)
			}

			for _, rec := range records {
				got := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, rec.key) == 1
				if got != rec.kept {
					t.Errorf("record %s: kept = %v, want %v", rec.key, got, rec.kept)
				}
			}
			if got := count(t, db, `SELECT count(*) FROM payment`); got != 3 {
				t.Errorf("payments = %d, want all 3: retention never deletes a payment", got)
			}
			var events []string
			rows, _ := db.Query(context.Background(), `SELECT event_id::text || '/' || consumer_name FROM processed_event ORDER BY 1`)
			for rows.Next() {
				var id string
				_ = rows.Scan(&id)
				events = append(events, id)
			}
			if rows.Err() != nil || len(events) != 1 || events[0] != "00000000-0000-7000-8000-000000000001/c" {
				t.Errorf("processed events left = %v (%v), want only the one inside the retention", events, rows.Err())
			}
			var left []int64
			rows, _ = db.Query(context.Background(), `SELECT id FROM outbox_event ORDER BY id`)
			for rows.Next() {
				var id int64
				_ = rows.Scan(&id)
				left = append(left, id)
			}
			if rows.Err() != nil || fmt.Sprint(left) != "[1 3]" {
				t.Errorf("outbox rows left = %v (%v), want [1 3]: the recent published one and the unpublished one", left, rows.Err())
			}
			for table, want := range map[string]float64{"idempotency_record": 4, "processed_event": 3, "outbox_event": 1} {
				if got := r.counter(t, "payment_retention_deleted_rows_total", map[string]string{"table": table}); got != want {
					t.Errorf("deleted rows metric for %s = %v, want %v", table, got, want)
				}
			}
			if got := r.counter(t, "payment_job_runs_total", map[string]string{"job": "purge-expired", "outcome": "ok"}); got != 1 {
				t.Errorf("runs metric = %v, want 1", got)
			}
		})
	}
}

// A backlog of 200,000 expired records is deleted in many short batches,
// and requests keep claiming keys all the while: every expired record goes,
// every key claimed during the purge stays.
func TestPurgeOfALargeBacklogRunsInBatchesBesideLiveTraffic(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	const backlog = 200_000
	exec(t, db, `INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, created_at)
		SELECT 'c', 'old-' || i, 'h', 'COMPLETED', '{}', 201, now() - interval '100 hours'
		  FROM generate_series(1, $1) AS i`, backlog)
	r := newReplica(t, dsn, replicaOptions{})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	purgeDone := make(chan struct{})
	firstInsert := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var claimed []string
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-purgeDone:
					return
				case <-ctx.Done():
					return
				default:
				}
				key := fmt.Sprintf("new-%d-%d", w, i)
				// The charge's claim statement; its order is not in the
				// projection, so it claims the key and reserves nothing.
				err := r.tx.Transact(ctx, func(ctx context.Context, repos app.Repos) error {
					res, err := repos.Charges.Claim(ctx, app.KeyClaim{
						Scope: app.IdempotencyScope{ClientID: "c", Key: key}, CommandHash: "h", Token: uuid.New(), LockFor: time.Minute}, unknownOrderCharge)
					if err == nil && !res.Claimed {
						err = fmt.Errorf("key %s was not claimed", key)
					}
					return err
				})
				if err != nil {
					t.Errorf("claim during the purge: %v", err)
					return
				}
				mu.Lock()
				claimed = append(claimed, key)
				mu.Unlock()
				once.Do(func() { close(firstInsert) })
			}
		})
	}
	<-firstInsert
	uc := app.NewPurgeExpired(repository.NewRetention(r.db), defaultPolicy, 5000)
	results, err := uc.Handle(ctx, time.Now())
	close(purgeDone)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	idem := results[0]
	if idem.Table != app.TableIdempotencyRecord || idem.Deleted != backlog || idem.Batches < 2 {
		t.Errorf("idempotency purge = %+v, want %d rows deleted over more than one batch", idem, backlog)
	}
	if left := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key LIKE 'old-%'`); left != 0 {
		t.Errorf("%d expired records left", left)
	}
	if len(claimed) == 0 {
		t.Fatal("no key was claimed during the purge")
	}
	if got := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = ANY($1)`, claimed); got != len(claimed) {
		t.Errorf("%d of %d keys claimed during the purge are left", got, len(claimed))
	}
}

var unknownOrderCharge = func() domain.Charge {
	money, err := domain.NewMoney(decimal.RequireFromString("10"), "RUB")
	if err != nil {
		panic(err)
	}
	c, err := domain.NewCharge(999_999, 1, money, "sandbox", "pi_unknown_order")
	if err != nil {
		panic(err)
	}
	return c
}()
