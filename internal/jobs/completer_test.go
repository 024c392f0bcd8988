package jobs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// crashingProvider stands for a process that dies while the provider call
// is in flight: phase 1 (claim + PENDING payment) has committed, nothing
// after it runs. ErrAbortHandler makes the server drop the connection, as a
// dead process would.
type crashingProvider struct{}

func (crashingProvider) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: time.Second}
}

func (crashingProvider) Charge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	panic(http.ErrAbortHandler)
}

func (crashingProvider) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	panic(http.ErrAbortHandler)
}

func apiServer(t *testing.T, r *replica, charge *app.ChargePayment) *httptest.Server {
	t.Helper()
	h := httpapi.NewHandler(httpapi.Deps{
		Logger:        discardLogger,
		APIKeys:       []config.APIKey{{ClientID: "demo-client", KeyDigest: sha256.Sum256([]byte("demo-secret"))}},
		Providers:     []domain.ProviderName{sandbox.Name},
		ChargePayment: charge,
		GetPayment:    app.NewGetPayment(r.tx),
		Ready:         func(ctx context.Context) error { return repository.Ping(ctx, r.db) },
		Registry:      prometheus.NewRegistry(),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

const chargeBody = `{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_abandoned"}`

func postCharge(srv *httptest.Server) (*http.Response, []byte, error) {
	return postChargeWith(srv, "abandoned-1", chargeBody)
}

func postChargeWith(srv *httptest.Server, key, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer demo-secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return resp, answer, err
}

// A client's charge dies after phase 1 and the client never comes back. The
// completer rebuilds the command from the reserved payment (same command
// hash as the original request), takes the expired claim over and drives the
// charge to SUCCEEDED with one provider call; the client's late retry then
// replays that outcome. Abandoned claims with nothing reserved are released;
// a live claim is left alone.
func TestCompleterFinishesAnAbandonedCharge(t *testing.T) {
	t.Parallel()
	rig := newCompleterRig(t)
	db, sb, r, charge, calls := rig.db, rig.sb, rig.r, rig.charge, rig.calls

	crashing := chargeWith(r, crashingProvider{})
	if resp, _, err := postCharge(apiServer(t, r, crashing)); err == nil {
		t.Fatalf("the crashing request answered %d", resp.StatusCode)
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
			WHERE r.status = 'IN_PROGRESS' AND p.status = 'PENDING'`); n != 1 {
		t.Fatalf("after the crash: %d claimed records with a PENDING payment, want 1", n)
	}
	// Time passes: the lock expires, and the client does not come back
	// within the completer's grace of a minute.
	exec(t, db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes'`)
	now := time.Now()
	for _, rec := range []record{
		{key: "abandoned-claim", status: app.RecordInProgress, lockedUntil: now.Add(-2 * time.Minute)},
		{key: "live-claim", status: app.RecordInProgress, lockedUntil: now.Add(time.Hour), withPayment: true},
		{key: "just-expired-claim", status: app.RecordInProgress, lockedUntil: now.Add(-time.Second), withPayment: true},
	} {
		insertRecord(t, db, now, rec)
	}

	if err := r.jobs.CompleteAbandonedCharges(context.Background()); err != nil {
		t.Fatal(err)
	}

	var status, paymentStatus string
	var httpStatus int
	var stored []byte
	err := db.QueryRow(context.Background(), `
		SELECT r.status, r.http_status, r.response::text, p.status
		  FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		 WHERE r.idempotency_key = 'abandoned-1'`).Scan(&status, &httpStatus, &stored, &paymentStatus)
	if err != nil {
		t.Fatal(err)
	}
	if status != "COMPLETED" || httpStatus != http.StatusCreated || paymentStatus != "SUCCEEDED" {
		t.Fatalf("after the completer: record %s %d, payment %s; want COMPLETED 201, SUCCEEDED", status, httpStatus, paymentStatus)
	}
	approved := func() float64 {
		return r.counterOf(t, calls, "approved")
	}
	if approved() != 1 || len(sb.Ledger().Succeeded("pi_abandoned")) != 1 {
		t.Fatalf("provider calls approved = %v, ledger %+v; want 1 call and 1 charge", approved(), sb.Ledger())
	}
	if n := count(t, db, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'abandoned-claim'`); n != 0 {
		t.Errorf("the abandoned claim with no payment was not released")
	}
	for _, key := range []string{"live-claim", "just-expired-claim"} {
		if n := count(t, db, `SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
				WHERE r.idempotency_key = $1 AND r.status = 'IN_PROGRESS' AND p.status = 'PENDING'`, key); n != 1 {
			t.Errorf("%s was touched: its client may still retry", key)
		}
	}
	for outcome, want := range map[string]float64{"completed": 1, "released": 1, "busy": 0, "unknown": 0, "failed": 0} {
		if got := r.counter(t, "payment_abandoned_charges_total", map[string]string{"outcome": outcome}); got != want {
			t.Errorf("abandoned charges %s = %v, want %v", outcome, got, want)
		}
	}

	// The client comes back at last with the same key and command.
	resp, body, err := postCharge(apiServer(t, r, charge))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(body, stored) {
		t.Errorf("retry: %d replayed=%q body %s; want 201, replayed, the stored body %s",
			resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body, stored)
	}
	if approved() != 1 || sb.Ledger().Counters.Requests != 1 {
		t.Errorf("the retry reached the provider: approved = %v, ledger %+v", approved(), sb.Ledger())
	}
}

// A provider answer is lost and the client never retries. The completer
// resolves it: it asks the provider again with the same provider key and
// records the charge that was made, once. On the way it meets a provider it
// cannot reach: "not charged" for that call, but the payment was handed to
// the provider before, so the completer must keep it, not release it.
func TestCompleterResolvesALostProviderAnswer(t *testing.T) {
	t.Parallel()
	lost := loseTheAnswer(t, "drop_lost", "lost-1")
	dsn, db, sb, calls, base, charge, body := lost.dsn, lost.db, lost.provider, lost.calls, lost.base, lost.charge, lost.body
	const pendingClaim = `SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		WHERE r.idempotency_key = 'lost-1' AND r.status = 'IN_PROGRESS' AND p.status = 'PENDING'`
	// The client does not come back within the completer's grace.
	expire := func() {
		exec(t, db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes' WHERE status = 'IN_PROGRESS'`)
	}

	// A replica whose provider is unreachable: connection refused.
	unreachable := newReplica(t, dsn, replicaOptions{charge: chargeThrough(t, base, "http://"+deadAddr(t), calls)})
	expire()
	if err := unreachable.jobs.CompleteAbandonedCharges(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, pendingClaim); n != 1 {
		t.Fatal("the completer released a payment the provider may have charged")
	}
	if got := unreachable.counter(t, "payment_abandoned_charges_total", map[string]string{"outcome": "unknown"}); got != 1 {
		t.Fatalf("abandoned charges unknown = %v, want 1", got)
	}

	r := newReplica(t, dsn, replicaOptions{charge: charge})
	expire()
	if err := r.jobs.CompleteAbandonedCharges(context.Background()); err != nil {
		t.Fatal(err)
	}
	var httpStatus int
	var paymentStatus string
	err := db.QueryRow(context.Background(), `SELECT r.http_status, p.status FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		WHERE r.idempotency_key = 'lost-1' AND r.status = 'COMPLETED'`).Scan(&httpStatus, &paymentStatus)
	if err != nil || httpStatus != http.StatusCreated || paymentStatus != "SUCCEEDED" {
		t.Fatalf("after the completer: %d %s %v, want COMPLETED 201 and SUCCEEDED", httpStatus, paymentStatus, err)
	}
	if n := count(t, db, `SELECT count(*) FROM outbox_event`); n != 1 {
		t.Fatalf("outbox events = %d, want 1", n)
	}
	charged := sb.Ledger().Succeeded("drop_lost")
	if len(charged) != 1 || charged[0].Requests != 2 {
		t.Fatalf("provider ledger: %+v, want one charge from two requests (the lost one and the completer's)", charged)
	}
	resp, answer, err := postChargeWith(apiServer(t, r, charge), "lost-1", body)
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the client's late retry: %v %s %v, want the stored 201", resp.StatusCode, answer, err)
	}
}

// Only for a charge does an unfinished record with payment_id NULL mean
// "nothing reserved". A refund whose provider answer was lost keeps its
// recovery point elsewhere; a completer that released its record would
// leave every retry of its key to meet a fresh claim, 409
// request-in-progress, while the refund stays PENDING. Each job, on its own, must leave the
// unfinished records of a command it does not know exactly as they are,
// however old and expired, while it still does its work on the charge's.
// Finished records go after the TTL whatever their command.
func TestJobsLeaveUnfinishedRecordsOfUnknownCommandsAlone(t *testing.T) {
	t.Parallel()
	const completer, purge, release = "completer", "purge", "release"
	// Past the TTL, lock expired beyond the completer's grace: every record
	// below is as old as any job ever sees one.
	old, expired := defaultPolicy.IdempotencyTTL+time.Hour, time.Now().Add(-2*time.Minute)
	records := []struct {
		record
		goneAfter []string // the jobs that delete it
	}{
		{record: record{key: "refund-answer-lost", command: "refund", status: app.RecordInProgress, age: old, lockedUntil: expired}},
		{record: record{key: "refund-of-a-payment", command: "refund", status: app.RecordInProgress, age: old, lockedUntil: expired, withPayment: true}},
		{record: record{key: "refund-completed", command: "refund", status: app.RecordCompleted, age: old}, goneAfter: []string{purge}},
		{record: record{key: "charge-claim-abandoned", status: app.RecordInProgress, age: old, lockedUntil: expired}, goneAfter: []string{completer, purge, release}},
	}
	for _, job := range []struct {
		name string
		run  func(context.Context, *replica) error
	}{
		{completer, func(ctx context.Context, r *replica) error { return r.jobs.CompleteAbandonedCharges(ctx) }},
		{purge, func(ctx context.Context, r *replica) error { return r.jobs.PurgeExpired(ctx) }},
		// The completer's release of a key it listed as a charge's, after
		// the key changed hands to another command: the DELETE re-checks.
		{release, func(ctx context.Context, r *replica) error {
			for _, rec := range records {
				scope := app.IdempotencyScope{ClientID: "c", Key: rec.key}
				if _, err := repository.NewRetention(r.db).ReleaseAbandoned(ctx, []app.CommandName{app.CommandCharge}, scope); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(job.name, func(t *testing.T) {
			t.Parallel()
			dsn := testdb.New(t)
			db := pool(t, dsn)
			r := newReplica(t, dsn, replicaOptions{})
			now := time.Now()
			before := map[string]string{}
			for _, rec := range records {
				insertRecord(t, db, now, rec.record)
				before[rec.key] = recordRow(t, db, rec.key)
			}

			if err := job.run(context.Background(), r); err != nil {
				t.Fatal(err)
			}

			for _, rec := range records {
				switch after := recordRow(t, db, rec.key); {
				case slices.Contains(rec.goneAfter, job.name):
					if after != "" {
						t.Errorf("%s is still there: %s", rec.key, after)
					}
				case after != before[rec.key]:
					t.Errorf("%s was touched:\n before %s\n after  %s", rec.key, before[rec.key], after)
				}
			}
			if job.name == completer {
				for outcome, want := range map[string]float64{"completed": 0, "released": 1, "busy": 0, "unknown": 0, "failed": 0} {
					if got := r.counter(t, "payment_abandoned_charges_total", map[string]string{"outcome": outcome}); got != want {
						t.Errorf("abandoned charges %s = %v, want %v: the completer must not even look at another command's record", outcome, got, want)
					}
				}
			}
		})
	}
}

// recordRow is the whole idempotency record of key as JSON, "" if there is
// none.
func recordRow(t testing.TB, db *pgxpool.Pool, key string) string {
	t.Helper()
	var row string
	err := db.QueryRow(context.Background(), `SELECT row_to_json(r)::text FROM idempotency_record r WHERE idempotency_key = $1`, key).Scan(&row)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return row
}

// lostAnswer is a charge whose first answer was 503 outcome-unknown, with
// the replica, provider and counters it ran on.
type lostAnswer struct {
	dsn      string
	db       *pgxpool.Pool
	provider *sandboxprovider.Server
	calls    *prometheus.CounterVec
	base     *replica
	charge   *app.ChargePayment
	body     string
}

// loseTheAnswer charges order 1001 under key with the sandbox reference
// ref, whose prefix makes the first answer get lost, and requires the
// client to be told the outcome is unknown.
func loseTheAnswer(t *testing.T, ref, key string) lostAnswer {
	t.Helper()
	l := lostAnswer{dsn: testdb.New(t), provider: startProvider(t), calls: provider.CallsMetric(prometheus.NewRegistry())}
	l.db = pool(t, l.dsn)
	exec(t, l.db, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`)
	l.base = newReplica(t, l.dsn, replicaOptions{})
	l.charge = chargeThrough(t, l.base, l.provider.URL, l.calls)
	l.body = strings.Replace(chargeBody, "pi_abandoned", ref, 1)
	resp, answer, err := postChargeWith(apiServer(t, l.base, l.charge), key, l.body)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(answer), "outcome-unknown") {
		t.Fatalf("first answer: %v %s %v, want 503 outcome-unknown", resp.StatusCode, answer, err)
	}
	return l
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// completerRig is a database with order 1001 projected, the sandbox
// provider, and a replica whose charges (charge, its completer's among
// them) go through it, counted in calls.
type completerRig struct {
	db     *pgxpool.Pool
	sb     *sandboxprovider.Server
	r      *replica
	charge *app.ChargePayment
	calls  *prometheus.CounterVec
}

func newCompleterRig(t *testing.T) completerRig {
	t.Helper()
	dsn := testdb.New(t)
	db := pool(t, dsn)
	exec(t, db, `INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES (1001, 42, 100.50, 'RUB')`)
	calls := provider.CallsMetric(prometheus.NewRegistry())
	sb := startProvider(t)
	r := newReplica(t, dsn, replicaOptions{})
	charge := chargeThrough(t, r, sb.URL, calls)
	return completerRig{db: db, sb: sb, r: newReplica(t, dsn, replicaOptions{charge: charge}), charge: charge, calls: calls}
}

// A charge that names its payment method (paymentMethod, Stripe's pm_...)
// hashes it, so the completer can rebuild the command only if the payment
// keeps it: an abandoned charge with a payment method is driven to its end
// like any other, not left to a client who may never come back.
func TestCompleterFinishesAnAbandonedChargeThatNamesItsPaymentMethod(t *testing.T) {
	t.Parallel()
	rig := newCompleterRig(t)
	db, sb, r := rig.db, rig.sb, rig.r

	body := `{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_with_method","paymentMethod":"pm_card_visa"}`
	if resp, _, err := postChargeWith(apiServer(t, r, chargeWith(r, crashingProvider{})), "abandoned-pm", body); err == nil {
		t.Fatalf("the crashing request answered %d", resp.StatusCode)
	}
	exec(t, db, `UPDATE idempotency_record SET locked_until = clock_timestamp() - interval '2 minutes'`)
	if err := r.jobs.CompleteAbandonedCharges(context.Background()); err != nil {
		t.Fatal(err)
	}
	var status, paymentStatus, method string
	err := db.QueryRow(context.Background(), `
		SELECT r.status, p.status, coalesce(p.payment_method, '')
		  FROM idempotency_record r JOIN payment p ON p.id = r.payment_id
		 WHERE r.idempotency_key = 'abandoned-pm'`).Scan(&status, &paymentStatus, &method)
	if err != nil {
		t.Fatal(err)
	}
	if status != "COMPLETED" || paymentStatus != "SUCCEEDED" || method != "pm_card_visa" {
		t.Fatalf("after the completer: record %s, payment %s with method %q; want COMPLETED, SUCCEEDED, pm_card_visa", status, paymentStatus, method)
	}
	if n := len(sb.Ledger().Succeeded("pi_with_method")); n != 1 {
		t.Fatalf("charges at the provider = %d, want 1", n)
	}
}
