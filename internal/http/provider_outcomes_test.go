package http_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/faultproxy"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// chargeState is everything the service and the provider hold about one
// charge: the key's record, the order's payments, their events, and the
// provider's ledger.
type chargeState struct {
	recordStatus  string // "" if there is no record
	recordHTTP    int
	recordPayment bool // the record points at a payment (the recovery point)
	lockExpired   bool // IN_PROGRESS records: a retry may take it over now
	payments      map[string]int
	events        int
	charged       []sandboxprovider.Charge // succeeded at the provider, for ref
}

func (s *testService) state(t *testing.T, key string, order int64, ref string) chargeState {
	t.Helper()
	st := chargeState{payments: map[string]int{}}
	var status *string
	var httpStatus *int
	err := s.db.QueryRow(context.Background(), `
		SELECT status, http_status, payment_id IS NOT NULL, coalesce(locked_until <= clock_timestamp(), false)
		  FROM idempotency_record WHERE client_id = 'demo-client' AND idempotency_key = $1`, key).
		Scan(&status, &httpStatus, &st.recordPayment, &st.lockExpired)
	if err == nil {
		st.recordStatus = *status
		if httpStatus != nil {
			st.recordHTTP = *httpStatus
		}
	}
	rows, err := s.db.Query(context.Background(), `SELECT status, count(*) FROM payment WHERE order_id = $1 GROUP BY status`, order)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ps string
		var n int
		if err := rows.Scan(&ps, &n); err != nil {
			t.Fatal(err)
		}
		st.payments[ps] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	st.events = s.count(t, `SELECT count(*) FROM outbox_event WHERE message_key = $1`, strconv.FormatInt(order, 10))
	st.charged = s.ledger(t).Succeeded(ref)
	return st
}

// The provider charges and its answer is lost, four ways. The client is
// told the truth (503 outcome-unknown: it may have been charged), nothing
// is deleted, and its retry with the same key records the provider's answer:
// one charge at the provider with the right amount, one payment, one event,
// and the key's stored answer.
func TestLostProviderAnswerIsResolvedByTheRetry(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), map[string]string{"PROVIDER_TIMEOUT": "500ms"},
		sandboxprovider.Config{SlowDelay: 3 * time.Second})

	tests := []struct {
		ref                string
		chargedBeforeRetry bool
	}{
		{"drop_1", true},  // charged, then the connection dropped without an answer
		{"gw502_1", true}, // charged, then a gateway answered 502
		{"slow_1", true},  // charged, answered after the service stopped waiting
		{"busy_1", false}, // refused as in progress: unknown, though nothing was charged
	}
	for i, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			t.Parallel()
			order := int64(2001 + i)
			s.addOrder(t, order, 42, "250.75", "RUB")
			key := "key-" + tc.ref
			body := chargeBody(order, 42, "250.75", "RUB", tc.ref)

			first := s.charge(t, key, body)
			wantProblem(t, first, http.StatusServiceUnavailable, "outcome-unknown")
			if ra := first.header.Get("Retry-After"); ra != "1" {
				t.Fatalf("Retry-After = %q, want 1: the lock was given back at once", ra)
			}
			if strings.Contains(string(first.body), "Nothing was charged") {
				t.Fatalf("an unknown outcome must not claim nothing was charged: %s", first.body)
			}
			st := s.state(t, key, order, tc.ref)
			if st.recordStatus != "IN_PROGRESS" || !st.recordPayment || !st.lockExpired ||
				st.payments["PENDING"] != 1 || len(st.payments) != 1 || st.events != 0 {
				t.Fatalf("after the lost answer: %+v; want the claim kept with its PENDING payment, lock ended, no event", st)
			}
			if got := len(st.charged); got != btoi(tc.chargedBeforeRetry) {
				t.Fatalf("charges at the provider before the retry = %d, want %v", got, tc.chargedBeforeRetry)
			}

			retry := s.charge(t, key, body)
			if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" ||
				decode[paymentJSON](t, retry).Status != "SUCCEEDED" {
				t.Fatalf("retry: %d %s, want 201 SUCCEEDED", retry.status, retry.body)
			}
			replay := s.charge(t, key, body)
			if replay.status != http.StatusCreated || !bytes.Equal(replay.body, retry.body) || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: %d %s", replay.status, replay.body)
			}

			st = s.state(t, key, order, tc.ref)
			if st.recordStatus != "COMPLETED" || st.recordHTTP != http.StatusCreated ||
				st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 || st.events != 1 {
				t.Fatalf("after the retry: %+v; want COMPLETED 201, one SUCCEEDED payment, one event", st)
			}
			if len(st.charged) != 1 || st.charged[0].Amount.String() != "250.75" || st.charged[0].Currency != "RUB" {
				t.Fatalf("provider ledger for %s: %+v, want one charge of 250.75 RUB", tc.ref, st.charged)
			}
		})
	}
}

// A refusal that asking again cannot change is a final answer, and for a
// resumed payment the provider's record under the key, not the refusal,
// says what it is (without it, such a payment stays PENDING for ever, its
// key answering 503 outcome-unknown and its order blocked).
//
//   - refuse_: the first request is refused for good. Nothing can have been
//     charged under a key no earlier request used: FAILED at once.
//   - busyrefuse_: the first answer is lost (in progress, nothing charged),
//     the retry is refused for good, and the lookup finds no charge: FAILED.
//   - droprefuse_: the first request charges and its answer is lost, the
//     retry is refused for good, and the lookup finds the charge: SUCCEEDED,
//     never FAILED.
//
// Every final answer is stored and replayed, announced by one event, and a
// FAILED payment leaves the order free for a new attempt.
func TestRefusalsForGoodAreSettledByTheProvidersRecord(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)

	tests := []struct {
		ref          string
		firstUnknown bool   // the first answer is 503 outcome-unknown
		wantStatus   int    // the final answer
		wantCode     string // its problem code; "" for a payment
		wantPayment  string
		wantEvent    string
		charged      int // succeeded charges at the provider
	}{
		{"refuse_1", false, http.StatusPaymentRequired, "payment-failed", "FAILED", "PaymentFailed.v1", 0},
		{"busyrefuse_1", true, http.StatusPaymentRequired, "payment-failed", "FAILED", "PaymentFailed.v1", 0},
		{"droprefuse_1", true, http.StatusCreated, "", "SUCCEEDED", "PaymentSucceeded.v1", 1},
	}
	for i, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			t.Parallel()
			order := int64(2101 + i)
			s.addOrder(t, order, 42, "33.00", "RUB")
			key := "key-" + tc.ref
			body := chargeBody(order, 42, "33.00", "RUB", tc.ref)

			final := s.charge(t, key, body)
			if tc.firstUnknown {
				wantProblem(t, final, http.StatusServiceUnavailable, "outcome-unknown")
				final = s.charge(t, key, body)
			}
			if tc.wantCode != "" {
				p := wantProblem(t, final, tc.wantStatus, tc.wantCode)
				if p.Payment == nil || p.Payment.Status != tc.wantPayment || final.header.Get("Retry-After") != "" {
					t.Fatalf("final answer: %s (Retry-After %q); want the %s payment and no Retry-After", final.body, final.header.Get("Retry-After"), tc.wantPayment)
				}
			} else if final.status != tc.wantStatus || decode[paymentJSON](t, final).Status != tc.wantPayment {
				t.Fatalf("final answer: %d %s, want %d %s", final.status, final.body, tc.wantStatus, tc.wantPayment)
			}
			replay := s.charge(t, key, body)
			if replay.status != final.status || !bytes.Equal(replay.body, final.body) || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: %d %s, want the stored %d", replay.status, replay.body, final.status)
			}

			st := s.state(t, key, order, tc.ref)
			if st.recordStatus != "COMPLETED" || st.recordHTTP != tc.wantStatus || st.payments[tc.wantPayment] != 1 ||
				len(st.payments) != 1 || st.events != 1 || len(st.charged) != tc.charged {
				t.Fatalf("state: %+v; want COMPLETED %d, one %s payment, one event, %d charges", st, tc.wantStatus, tc.wantPayment, tc.charged)
			}
			if typ := s.eventTypes(t, order); len(typ) != 1 || typ[0] != tc.wantEvent {
				t.Fatalf("events = %v, want [%s]", typ, tc.wantEvent)
			}
			if tc.wantPayment != "FAILED" {
				return
			}
			next := s.charge(t, key+"-next", chargeBody(order, 42, "33.00", "RUB", "pi_next_"+tc.ref))
			if next.status != http.StatusCreated {
				t.Fatalf("a new attempt after FAILED: %d %s, want 201", next.status, next.body)
			}
		})
	}
}

// eventTypes lists the outbox's event types for an order, oldest first.
func (s *testService) eventTypes(t *testing.T, order int64) []string {
	t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT event_type FROM outbox_event WHERE message_key = $1 ORDER BY id`, strconv.FormatInt(order, 10))
	if err != nil {
		t.Fatal(err)
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return types
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The reviewer's scenario: the answer is lost, then a request with the same
// externalPaymentId but another order and amount arrives under a new key.
// Before the outcome model the lost charge's rows were deleted, so that
// request passed the second layer. Now the kept PENDING payment stops it,
// nothing is recorded as SUCCEEDED for the other order, and the original
// key's retry records the charge that was really made.
func TestLostAnswerThenSameExternalIDForAnotherOrder(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "5.00", "RUB")

	lost := s.charge(t, "k-1", chargeBody(1001, 42, "100.50", "RUB", "drop_shared"))
	wantProblem(t, lost, http.StatusServiceUnavailable, "outcome-unknown")

	other := s.charge(t, "k-2", chargeBody(1002, 42, "5.00", "RUB", "drop_shared"))
	wantProblem(t, other, http.StatusConflict, "external-payment-conflict")
	if st := s.state(t, "k-2", 1002, "drop_shared"); len(st.payments) != 0 || st.events != 0 {
		t.Fatalf("order 1002 after the conflict: %+v, want no payment and no event", st)
	}

	if r := s.charge(t, "k-1", chargeBody(1001, 42, "100.50", "RUB", "drop_shared")); r.status != http.StatusCreated {
		t.Fatalf("the first key's retry: %d %s", r.status, r.body)
	}
	st := s.state(t, "k-1", 1001, "drop_shared")
	if st.payments["SUCCEEDED"] != 1 || st.events != 1 || len(st.charged) != 1 || st.charged[0].Amount.String() != "100.5" {
		t.Fatalf("order 1001: %+v, want one payment, one event, one charge of 100.50", st)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("SUCCEEDED payments = %d, want 1", n)
	}
}

// The third layer: one paid order is paid once, whatever new keys and new
// external payments a client makes up.
func TestOnePaidOrderIsPaidOnce(t *testing.T) {
	t.Parallel()

	t.Run("a new key and a new external payment for a paid order", func(t *testing.T) {
		t.Parallel()
		s := startService(t, nil)
		s.addOrder(t, 3001, 42, "10.00", "RUB")
		if r := s.charge(t, "k-1", chargeBody(3001, 42, "10.00", "RUB", "pi_a")); r.status != http.StatusCreated {
			t.Fatalf("first: %d %s", r.status, r.body)
		}
		again := s.charge(t, "k-2", chargeBody(3001, 42, "10.00", "RUB", "pi_b"))
		wantProblem(t, again, http.StatusConflict, "order-already-paid")
		replay := s.charge(t, "k-2", chargeBody(3001, 42, "10.00", "RUB", "pi_b"))
		if !bytes.Equal(replay.body, again.body) || replay.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the stored answer is replayed: %d %s", replay.status, replay.body)
		}
		st := s.state(t, "k-2", 3001, "pi_b")
		if st.recordStatus != "COMPLETED" || st.recordHTTP != http.StatusConflict || st.recordPayment ||
			st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 || st.events != 1 || len(st.charged) != 0 {
			t.Fatalf("state: %+v; want k-2 stored as 409, one payment, one event, nothing charged for pi_b", st)
		}
		if l := s.ledger(t); l.Counters.Requests != 1 {
			t.Fatalf("provider requests = %d, want 1: the refused charge never reached it", l.Counters.Requests)
		}
	})

	t.Run("while another payment for the order is in flight", func(t *testing.T) {
		t.Parallel()
		s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 700 * time.Millisecond})
		s.addOrder(t, 3002, 42, "10.00", "RUB")
		var wg sync.WaitGroup
		var first response
		wg.Go(func() { first = s.charge(t, "k-1", chargeBody(3002, 42, "10.00", "RUB", "pi_a")) })
		waitFor(t, func() bool {
			return s.count(t, `SELECT count(*) FROM payment WHERE order_id = 3002 AND status = 'PENDING'`) == 1
		})
		during := s.charge(t, "k-2", chargeBody(3002, 42, "10.00", "RUB", "pi_b"))
		wantProblem(t, during, http.StatusConflict, "request-in-progress")
		if during.header.Get("Retry-After") == "" {
			t.Fatal("409 request-in-progress without Retry-After")
		}
		if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'k-2'`); n != 0 {
			t.Fatalf("k-2 left %d records; an in-progress answer is not stored", n)
		}
		wg.Wait()
		if first.status != http.StatusCreated {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		wantProblem(t, s.charge(t, "k-2", chargeBody(3002, 42, "10.00", "RUB", "pi_b")), http.StatusConflict, "order-already-paid")
	})

	t.Run("a decline leaves the order open for a new attempt", func(t *testing.T) {
		t.Parallel()
		s := startService(t, nil)
		s.addOrder(t, 3003, 42, "10.00", "RUB")
		wantProblem(t, s.charge(t, "k-1", chargeBody(3003, 42, "10.00", "RUB", "decline_a")), http.StatusPaymentRequired, "payment-declined")
		if r := s.charge(t, "k-2", chargeBody(3003, 42, "10.00", "RUB", "pi_b")); r.status != http.StatusCreated {
			t.Fatalf("new attempt after a decline: %d %s", r.status, r.body)
		}
		st := s.state(t, "k-2", 3003, "pi_b")
		if st.payments["DECLINED"] != 1 || st.payments["SUCCEEDED"] != 1 || st.events != 2 || len(st.charged) != 1 {
			t.Fatalf("state: %+v; want one declined and one succeeded payment, two events, one charge", st)
		}
	})

	t.Run("twenty attempts at once, each its own key and external payment", func(t *testing.T) {
		t.Parallel()
		s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 100 * time.Millisecond})
		s.addOrder(t, 3004, 42, "10.00", "RUB")
		const n = 20
		responses := make([]response, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				responses[i] = s.charge(t, "k-"+strconv.Itoa(i), chargeBody(3004, 42, "10.00", "RUB", "pi_"+strconv.Itoa(i)))
			})
		}
		close(start)
		wg.Wait()
		created := 0
		for _, r := range responses {
			switch {
			case r.status == http.StatusCreated:
				created++
			case r.status == http.StatusConflict:
				if code := decode[problemJSON](t, r).Code; code != "request-in-progress" && code != "order-already-paid" {
					t.Fatalf("409 %s", r.body)
				}
			default:
				t.Fatalf("unexpected %d %s", r.status, r.body)
			}
		}
		live := s.count(t, `SELECT count(*) FROM payment WHERE order_id = 3004 AND status IN ('PENDING', 'SUCCEEDED')`)
		if l := s.ledger(t); created != 1 || live != 1 || l.Counters.Charges != 1 {
			t.Fatalf("created = %d, live payments = %d, provider charges = %d; want 1, 1, 1", created, live, l.Counters.Charges)
		}
	})
}

// A lost answer blocks the order for a careless client (a new key and a
// new external payment per attempt): the PENDING payment's outcome is not
// known, so a second charge could double it. Only the original key's retry
// resolves it, and then the careless attempt is told the order is paid.
func TestLostAnswerBlocksANewAttemptForTheOrder(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 4001, 42, "10.00", "RUB")
	wantProblem(t, s.charge(t, "k-1", chargeBody(4001, 42, "10.00", "RUB", "drop_a")), http.StatusServiceUnavailable, "outcome-unknown")
	wantProblem(t, s.charge(t, "k-2", chargeBody(4001, 42, "10.00", "RUB", "pi_b")), http.StatusConflict, "request-in-progress")
	if r := s.charge(t, "k-1", chargeBody(4001, 42, "10.00", "RUB", "drop_a")); r.status != http.StatusCreated {
		t.Fatalf("the original key's retry: %d %s", r.status, r.body)
	}
	wantProblem(t, s.charge(t, "k-2", chargeBody(4001, 42, "10.00", "RUB", "pi_b")), http.StatusConflict, "order-already-paid")
	if l := s.ledger(t); l.Counters.Charges != 1 || len(l.Succeeded("pi_b")) != 0 {
		t.Fatalf("provider: %+v, want one charge, none for pi_b", l.Counters)
	}
}

// The database goes away after the provider has charged and before the
// outcome is recorded. The client is told the outcome is unknown (never
// "nothing was charged"); once the database is back, the retry with the
// same key records the charge once.
func TestDatabaseLostBetweenProviderCallAndRecord(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	proxy, proxied := proxyDatabase(t, dsn)
	s := startServiceWith(t, proxied, map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "3s", "PROVIDER_TIMEOUT": "1500ms", "PROVIDER_MAX_REQUEST_AGE": "1s"},
		sandboxprovider.Config{Latency: time.Second})
	direct, err := pgxpool.New(context.Background(), dsn) // the test's own view, around the proxy
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	s.db = direct
	s.addOrder(t, 5001, 42, "42.00", "RUB")
	body := chargeBody(5001, 42, "42.00", "RUB", "pi_dbdown")

	var wg sync.WaitGroup
	var first response
	wg.Go(func() { first = s.charge(t, "k", body) })
	// Phase 1 committed and the provider working on the charge: the
	// provider has the request, so the service has had phase 1's answer
	// (a committed row alone does not say its answer reached the service).
	waitFor(t, func() bool {
		return s.provider.Counters().Requests == 1 &&
			s.count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS' AND payment_id IS NOT NULL`) == 1
	})
	if err := proxy.SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	wantProblem(t, first, http.StatusServiceUnavailable, "outcome-unknown")
	if first.header.Get("Retry-After") == "" {
		t.Fatal("503 outcome-unknown without Retry-After")
	}
	st := s.state(t, "k", 5001, "pi_dbdown")
	if st.recordStatus != "IN_PROGRESS" || st.payments["PENDING"] != 1 || len(st.charged) != 1 {
		t.Fatalf("while the database is away: %+v, want the claim, a PENDING payment, and the provider's charge", st)
	}

	if err := proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	var final response
	deadline := time.Now().Add(20 * time.Second)
	for {
		final = s.charge(t, "k", body)
		if final.status == http.StatusCreated || time.Now().After(deadline) {
			break
		}
		// Until the lock runs out: 409 in progress (or a 503 while the pool
		// reconnects). Neither claims that nothing was charged.
		if final.status != http.StatusConflict && final.status != http.StatusServiceUnavailable {
			t.Fatalf("retry: %d %s", final.status, final.body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if final.status != http.StatusCreated {
		t.Fatalf("no 201 within 20s: %d %s", final.status, final.body)
	}
	st = s.state(t, "k", 5001, "pi_dbdown")
	if st.recordStatus != "COMPLETED" || st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 || st.events != 1 ||
		len(st.charged) != 1 || st.charged[0].Requests != 2 {
		t.Fatalf("after the retry: %+v; want one payment, one event, one charge asked for twice", st)
	}
}

// proxyDatabase puts a fault proxy between the service and PostgreSQL and
// returns it with the DSN that goes through it.
func proxyDatabase(t *testing.T, dsn string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	network, upstream := "tcp", u.Host
	if dir := q.Get("host"); strings.HasPrefix(dir, "/") { // a unix socket directory
		network, upstream = "unix", dir+"/.s.PGSQL."+q.Get("port")
		q.Del("host")
		q.Del("port")
	}
	p, err := faultproxy.New(network, upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	u.Host = p.Addr()
	u.RawQuery = q.Encode()
	return p, u.String()
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
