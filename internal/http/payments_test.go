package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

type paymentJSON struct {
	ID                int64  `json:"id"`
	OrderID           int64  `json:"orderId"`
	CustomerID        int64  `json:"customerId"`
	Amount            string `json:"amount"`
	Currency          string `json:"currency"`
	PaymentProvider   string `json:"paymentProvider"`
	ExternalPaymentID string `json:"externalPaymentId"`
	Status            string `json:"status"`
	CreatedAt         string `json:"createdAt"`
}

type problemJSON struct {
	Type    string       `json:"type"`
	Status  int          `json:"status"`
	Code    string       `json:"code"`
	Detail  string       `json:"detail"`
	Errors  []fieldError `json:"errors"`
	Payment *paymentJSON `json:"payment"`
}

type fieldError struct {
	Field string `json:"field"`
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

func wantProblem(t *testing.T, r response, status int, code string) problemJSON {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json", ct)
	}
	p := decode[problemJSON](t, r)
	if p.Code != code || p.Status != status || !strings.HasSuffix(p.Type, "/"+code) {
		t.Fatalf("problem = %+v, want code %s status %d", p, code, status)
	}
	return p
}

func TestChargeThenReplayReturnsByteIdenticalBody(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")

	first := s.charge(t, "key-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	if first.status != http.StatusCreated {
		t.Fatalf("first: status %d, body %s", first.status, first.body)
	}
	p := decode[paymentJSON](t, first)
	if p.Status != "SUCCEEDED" || p.Amount != "100.50" || p.OrderID != 1001 || p.ID == 0 {
		t.Fatalf("payment = %+v", p)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first response must not be marked as a replay")
	}

	// The same command, with reordered keys, other whitespace and an
	// equivalent amount, is a replay.
	same := `{ "externalPaymentId": "pi_1", "paymentProvider": "sandbox", "currency": "RUB",
	           "amount": "100.5", "customerId": 42, "orderId": 1001 }`
	for range 3 {
		replay := s.charge(t, "key-1", same)
		if replay.status != http.StatusCreated || !bytes.Equal(replay.body, first.body) {
			t.Fatalf("replay: status %d body %s, want 201 body %s", replay.status, replay.body, first.body)
		}
		if replay.header.Get("Idempotent-Replayed") != "true" {
			t.Fatal("replay must carry Idempotent-Replayed: true")
		}
	}

	if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_1' AND status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("payment rows = %d, want 1", n)
	}
	var stored []byte
	var status int
	err := s.db.QueryRow(context.Background(),
		`SELECT response::text, http_status FROM idempotency_record
		  WHERE client_id = 'demo-client' AND idempotency_key = 'key-1' AND status = 'COMPLETED'
		    AND lock_token IS NULL AND payment_id = $1`, p.ID).Scan(&stored, &status)
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusCreated || !bytes.Equal(stored, first.body) {
		t.Fatalf("stored %d %s, want 201 %s", status, stored, first.body)
	}
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls = %v, want 1", calls)
	}
	if replays := s.metric(t, "payment_idempotency_replays_total"); replays != 3 {
		t.Fatalf("replays metric = %v, want 3", replays)
	}

	got := s.request(t, http.MethodGet, "/payments/"+jsonNumber(p.ID), "", nil)
	if got.status != http.StatusOK || decode[paymentJSON](t, got) != p {
		t.Fatalf("GET: %d %s, want %+v", got.status, got.body, p)
	}
}

// The draft's Idempotency-Key is an RFC 8941 String, Stripe's a bare
// value (decision 0019): the quoted and the bare form of a key are one key,
// so a client that switches form between retries is replayed, not charged
// twice, and the key is stored decoded.
func TestQuotedAndBareFormsOfAKeyAreOneKey(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "7.00", "EUR")

	for _, tc := range []struct {
		name, first, retry, stored string
		order                      int64
		amount, currency, external string
	}{
		{name: "quoted, then bare", first: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, retry: `8e03978e-40d5-43e8-bc93-6894a57f9324`,
			stored: `8e03978e-40d5-43e8-bc93-6894a57f9324`, order: 1001, amount: "100.50", currency: "RUB", external: "pi_q1"},
		{name: "bare, then quoted with an escape", first: `a"b`, retry: `"a\"b"`,
			stored: `a"b`, order: 1002, amount: "7.00", currency: "EUR", external: "pi_q2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := chargeBody(tc.order, 42, tc.amount, tc.currency, tc.external)
			first := s.charge(t, tc.first, body)
			if first.status != http.StatusCreated {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			retry := s.charge(t, tc.retry, body)
			if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(retry.body, first.body) {
				t.Fatalf("retry with %s: %d, Idempotent-Replayed %q, %s; want the first answer replayed",
					tc.retry, retry.status, retry.header.Get("Idempotent-Replayed"), retry.body)
			}
			if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, tc.stored); n != 1 {
				t.Fatalf("%d records under the key %s, want 1", n, tc.stored)
			}
		})
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record`); n != 2 {
		t.Fatalf("%d idempotency records, want 2", n)
	}
	if calls := s.providerCalls(t); calls != 2 {
		t.Fatalf("provider calls = %v, want 2", calls)
	}
}

func TestSameKeyDifferentCommandIsConflictAndRunsNothing(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "7.00", "RUB")

	if r := s.charge(t, "key-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1")); r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	tests := []struct{ name, body string }{
		{"other order", chargeBody(1002, 42, "7.00", "RUB", "pi_2")},
		{"other external payment", chargeBody(1001, 42, "100.50", "RUB", "pi_2")},
		{"other amount", chargeBody(1001, 42, "100.51", "RUB", "pi_1")},
	}
	for _, tc := range tests {
		r := s.charge(t, "key-1", tc.body)
		wantProblem(t, r, http.StatusConflict, "idempotency-key-reused")
	}
	if n := s.count(t, `SELECT count(*) FROM payment`); n != 1 {
		t.Fatalf("payment rows = %d, want 1", n)
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record`); n != 1 {
		t.Fatalf("records = %d, want 1", n)
	}
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls = %v, want 1", calls)
	}
	if n := s.metric(t, "payment_idempotency_key_conflicts_total"); n != float64(len(tests)) {
		t.Fatalf("conflict metric = %v, want %d", n, len(tests))
	}
}

// Fifty identical requests at once: one execution, one provider call, one
// row. The provider answers slowly, so the duplicates arrive while the first
// is in flight and must be turned away, not run.
func TestConcurrentIdenticalRequestsChargeOnce(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 300 * time.Millisecond})
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	body := chargeBody(1001, 42, "100.50", "RUB", "pi_concurrent")

	const n = 50
	var wg sync.WaitGroup
	responses := make([]response, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			responses[i] = s.charge(t, "same-key", body)
		})
	}
	close(start)
	wg.Wait()

	answers := tallyIdenticalAnswers(t, responses)
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls = %v, want exactly 1", calls)
	}
	if got := s.count(t, `SELECT count(*) FROM payment`); got != 1 {
		t.Fatalf("payment rows = %d, want 1", got)
	}
	if got := s.metric(t, "payment_idempotency_in_progress_total"); got != float64(answers.inProgress) {
		t.Fatalf("in-progress metric = %v, want %d", got, answers.inProgress)
	}
	// After the first finished, the key replays its response.
	after := s.charge(t, "same-key", body)
	if after.status != http.StatusCreated || !bytes.Equal(after.body, answers.stored) {
		t.Fatalf("after: %d %s", after.status, after.body)
	}
}

// R-DIST-IDEM-4: a new key for an external payment already recorded gets
// the existing payment when it is the same charge, a conflict otherwise,
// and never a second row or provider call.
func TestSecondLayerExternalPaymentID(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "5.00", "RUB")

	first := s.charge(t, "key-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	want := decode[paymentJSON](t, first)

	again := s.charge(t, "key-2", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	if again.status != http.StatusOK || decode[paymentJSON](t, again) != want {
		t.Fatalf("new key, same charge: %d %s, want 200 with %+v", again.status, again.body, want)
	}
	// That answer is key-2's stored outcome now.
	if r := s.charge(t, "key-2", chargeBody(1001, 42, "100.50", "RUB", "pi_1")); r.status != http.StatusOK || !bytes.Equal(r.body, again.body) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("key-2 replay: %d %s", r.status, r.body)
	}

	conflict := s.charge(t, "key-3", chargeBody(1002, 42, "5.00", "RUB", "pi_1"))
	p := wantProblem(t, conflict, http.StatusConflict, "external-payment-conflict")
	if p.Payment != nil {
		t.Fatal("a conflict must not disclose the recorded payment")
	}

	if n := s.count(t, `SELECT count(*) FROM payment`); n != 1 {
		t.Fatalf("payment rows = %d, want 1", n)
	}
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls = %v, want 1", calls)
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED'`); n != 3 {
		t.Fatalf("completed records = %d, want 3", n)
	}
}

// The second layer answers an external payment id recorded by another
// client exactly as it answers one recorded by the same client for another
// charge: the same bytes, no payment, no owner, no hint which case it was.
// What is left (docs/design.md, "Per-client scope") is that the id is in
// use at all, which the UNIQUE constraint cannot hide.
func TestExternalPaymentConflictRevealsNothingOfTheOtherClient(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "5.00", "RUB")
	other := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + otherKey, "Idempotency-Key": key}
	}
	if r := s.charge(t, "mine", chargeBody(1001, 42, "100.50", "RUB", "pi_demo_owned")); r.status != http.StatusCreated {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	if r := s.request(t, http.MethodPost, "/payments", chargeBody(1002, 42, "5.00", "RUB", "pi_other_owned"), other("theirs")); r.status != http.StatusCreated {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}

	tests := []struct {
		name string
		send func() response
	}{
		{"own id, another charge", func() response {
			return s.charge(t, "own-conflict", chargeBody(1002, 42, "5.00", "RUB", "pi_demo_owned"))
		}},
		{"the other client's id, its very charge", func() response {
			return s.charge(t, "their-charge", chargeBody(1002, 42, "5.00", "RUB", "pi_other_owned"))
		}},
		{"the other client's id, another charge", func() response {
			return s.charge(t, "their-id", chargeBody(1001, 42, "100.50", "RUB", "pi_other_owned"))
		}},
	}
	var first []byte
	for _, tc := range tests {
		r := tc.send()
		p := wantProblem(t, r, http.StatusConflict, "external-payment-conflict")
		if p.Payment != nil {
			t.Errorf("%s: the conflict discloses a payment: %s", tc.name, r.body)
		}
		for _, secret := range []string{"other-client", "demo-client", "client", "pi_", "1002", "1001", "5.00", "100.50", "recorded"} {
			if bytes.Contains(r.body, []byte(secret)) {
				t.Errorf("%s: the answer mentions %q: %s", tc.name, secret, r.body)
			}
		}
		if first == nil {
			first = r.body
		} else if !bytes.Equal(r.body, first) {
			t.Errorf("%s: answer differs from the own-conflict answer:\n%s\n%s", tc.name, r.body, first)
		}
	}
	// The protection holds: one row per external payment, each its owner's.
	if n := s.count(t, `SELECT count(*) FROM payment`); n != 2 {
		t.Errorf("payments = %d, want 2", n)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = 'pi_other_owned' AND client_id = 'other-client' AND order_id = 1002`); n != 1 {
		t.Errorf("the other client's payment changed")
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE client_id = 'demo-client' AND http_status = 409`); n != 3 {
		t.Errorf("stored conflicts = %d, want 3", n)
	}
}

// A request that dies after claiming the key (process killed) leaves the
// claim and its reserved PENDING payment behind. A retry while the lock
// lives is turned away; after the lock expires it takes the key over and
// completes the same payment with one charge.
func TestRetryAfterCrashTakesOverExpiredLock(t *testing.T) {
	t.Parallel()
	s := startService(t, map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "2s", "PROVIDER_TIMEOUT": "1s", "PROVIDER_MAX_REQUEST_AGE": "1s"})
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	body := chargeBody(1001, 42, "100.50", "RUB", "pi_crash")

	// What the dead request left: the state after phase 1 of ChargePayment.
	// (cmd/payment-service's tests kill a real process for the same case.)
	// The command hash is taken from a real request's record, then the
	// state is rewound to "claimed, reserved, not charged".
	ctx := context.Background()
	if r := s.charge(t, "crash-key", body); r.status != http.StatusCreated {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}
	_, err := s.db.Exec(ctx, `
		WITH p AS (UPDATE payment SET status = 'PENDING' WHERE external_payment_id = 'pi_crash' RETURNING id)
		UPDATE idempotency_record SET status = 'IN_PROGRESS', response = NULL, http_status = NULL,
		       lock_token = gen_random_uuid(), locked_until = now() + interval '1 hour',
		       payment_id = (SELECT id FROM p)
		 WHERE idempotency_key = 'crash-key'`)
	if err != nil {
		t.Fatal(err)
	}
	callsBefore := s.providerCalls(t)

	held := s.charge(t, "crash-key", body)
	wantProblem(t, held, http.StatusConflict, "request-in-progress")

	if _, err := s.db.Exec(ctx, `UPDATE idempotency_record SET locked_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	retry := s.charge(t, "crash-key", body)
	if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after expiry: %d %s", retry.status, retry.body)
	}
	if decode[paymentJSON](t, retry).Status != "SUCCEEDED" {
		t.Fatalf("retry body %s", retry.body)
	}
	if calls := s.providerCalls(t) - callsBefore; calls != 1 {
		t.Fatalf("provider calls for the retry = %v, want 1", calls)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED' AND lock_token IS NULL`); n != 1 {
		t.Fatalf("completed records = %d, want 1", n)
	}
}

// A duplicate that meets a live claim is told what a client can follow.
// While the claim's owner may still answer (within its provider call's
// bound, PROVIDER_TIMEOUT, of the claim), a second: the answer may come any
// moment, and a replay read is cheap. After that the owner has answered or
// gone, and a retry can only take the claim over once the lock has run
// out: the remaining lock time, rounded up to whole seconds, never less
// than 1, never more. The claim's start is its lock's end less the lock
// timeout.
func TestInProgressRetryAfterIsShortWhileTheOwnerMayAnswer(t *testing.T) {
	t.Parallel()
	s := startService(t, map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "10m", "PROVIDER_TIMEOUT": "10s"})
	ctx := context.Background()
	tests := []struct {
		name     string
		lockLeft string // interval added to now() for locked_until
		min, max int    // accepted Retry-After: the test itself takes time
	}{
		{"a claim just made: its owner may answer any moment", "10 minutes", 1, 1},
		{"a claim past its call's bound: when the lock runs out", "9 minutes", 530, 540},
		{"25 seconds left", "25 seconds", 15, 25},
		// Rounded up to whole seconds. 1.5 s left when the row is written
		// leaves room for a loaded machine to get the request there in
		// time; the remaining fraction is then told as 1 or 2.
		{"a second and a half left rounds up", "1500 milliseconds", 1, 2},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// An order each: one order has one payment in flight at a time.
			order := int64(1001 + i)
			s.addOrder(t, order, 42, "100.50", "RUB")
			key := "live-lock-" + strings.Repeat("x", i)
			body := chargeBody(order, 42, "100.50", "RUB", "pi_live_"+key)
			// The state a crashed owner leaves after phase 1: the hash comes
			// from a real request's record, then it is rewound.
			if r := s.charge(t, key, body); r.status != http.StatusCreated {
				t.Fatalf("setup: %d %s", r.status, r.body)
			}
			var token string
			err := s.db.QueryRow(ctx, `
				WITH p AS (UPDATE payment SET status = 'PENDING' WHERE external_payment_id = $2 RETURNING id)
				UPDATE idempotency_record SET status = 'IN_PROGRESS', response = NULL, http_status = NULL,
				       lock_token = gen_random_uuid(), locked_until = clock_timestamp() + $3::interval,
				       payment_id = (SELECT id FROM p)
				 WHERE idempotency_key = $1
				RETURNING lock_token::text`, key, "pi_live_"+key, tc.lockLeft).Scan(&token)
			if err != nil {
				t.Fatal(err)
			}
			calls := s.providerCalls(t)

			r := s.charge(t, key, body)
			wantProblem(t, r, http.StatusConflict, "request-in-progress")
			got, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || got < tc.min || got > tc.max {
				t.Errorf("Retry-After = %q, want %d to %d", r.header.Get("Retry-After"), tc.min, tc.max)
			}
			// Nothing changed: the claim is the dead owner's, not charged again.
			if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1
				AND status = 'IN_PROGRESS' AND lock_token::text = $2`, key, token); n != 1 {
				t.Errorf("the claim changed hands or state")
			}
			if n := s.count(t, `SELECT count(*) FROM payment WHERE external_payment_id = $1 AND status = 'PENDING'`, "pi_live_"+key); n != 1 {
				t.Errorf("the reserved payment changed")
			}
			if d := s.providerCalls(t) - calls; d != 0 {
				t.Errorf("provider calls = %v, want 0", d)
			}
		})
	}
}

func TestIdempotencyKeysAreScopedPerClient(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 2001, 77, "10.00", "EUR")

	a := s.charge(t, "shared-key", chargeBody(1001, 42, "100.50", "RUB", "pi_a"))
	if a.status != http.StatusCreated {
		t.Fatalf("client A: %d %s", a.status, a.body)
	}
	other := map[string]string{"Authorization": "Bearer " + otherKey, "Idempotency-Key": "shared-key"}
	b := s.request(t, http.MethodPost, "/payments", chargeBody(2001, 77, "10.00", "EUR", "pi_b"), other)
	if b.status != http.StatusCreated || b.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("client B with the same key: %d %s, want its own 201", b.status, b.body)
	}
	// B replaying A's command under the shared key does not see A's reply.
	bReplay := s.request(t, http.MethodPost, "/payments", chargeBody(1001, 42, "100.50", "RUB", "pi_a"), other)
	wantProblem(t, bReplay, http.StatusConflict, "idempotency-key-reused")

	// Nor can B read A's payment.
	aID := decode[paymentJSON](t, a).ID
	get := s.request(t, http.MethodGet, "/payments/"+jsonNumber(aID), "", map[string]string{"Authorization": "Bearer " + otherKey})
	wantProblem(t, get, http.StatusNotFound, "payment-not-found")

	if n := s.count(t, `SELECT count(DISTINCT client_id) FROM idempotency_record WHERE idempotency_key = 'shared-key'`); n != 2 {
		t.Fatalf("clients with records for the shared key = %d, want 2", n)
	}
	if n := s.count(t, `SELECT count(*) FROM payment`); n != 2 {
		t.Fatalf("payments = %d, want 2", n)
	}
}

func TestDeclinedChargeIsRecordedAndReplayed(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	body := chargeBody(1001, 42, "100.50", "RUB", "decline_card")

	first := s.charge(t, "k", body)
	p := wantProblem(t, first, http.StatusPaymentRequired, "payment-declined")
	if p.Payment == nil || p.Payment.Status != "DECLINED" {
		t.Fatalf("declined problem must carry the payment: %s", first.body)
	}
	replay := s.charge(t, "k", body)
	if replay.status != http.StatusPaymentRequired || !bytes.Equal(replay.body, first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", replay.status, replay.body)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE status = 'DECLINED'`); n != 1 {
		t.Fatalf("declined payments = %d, want 1", n)
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'COMPLETED' AND http_status = 402`); n != 1 {
		t.Fatalf("stored 402 outcomes = %d, want 1", n)
	}
	if calls := s.metric(t, `payment_provider_calls_total{outcome="declined",provider="sandbox"}`); calls != 1 {
		t.Fatalf("declined provider calls = %v, want 1", calls)
	}
}

// Outcomes that are not the command's final result store nothing, so the
// same key works once the cause is gone.
func TestOutcomesThatAreNotStored(t *testing.T) {
	t.Parallel()

	t.Run("unknown order, then the order arrives", func(t *testing.T) {
		t.Parallel()
		s := startService(t, nil)
		body := chargeBody(1001, 42, "100.50", "RUB", "pi_1")
		wantProblem(t, s.charge(t, "k", body), http.StatusUnprocessableEntity, "order-not-found")
		if n := s.count(t, `SELECT count(*) FROM idempotency_record`) + s.count(t, `SELECT count(*) FROM payment`); n != 0 {
			t.Fatalf("rows after 422 = %d, want 0", n)
		}
		s.addOrder(t, 1001, 42, "100.50", "RUB")
		if r := s.charge(t, "k", body); r.status != http.StatusCreated {
			t.Fatalf("retry after the order arrived: %d %s", r.status, r.body)
		}
	})

	t.Run("order mismatch", func(t *testing.T) {
		t.Parallel()
		s := startService(t, nil)
		s.addOrder(t, 1001, 42, "100.50", "RUB")
		for _, body := range []string{
			chargeBody(1001, 43, "100.50", "RUB", "pi_1"),
			chargeBody(1001, 42, "100.49", "RUB", "pi_1"),
			chargeBody(1001, 42, "100.50", "EUR", "pi_1"),
		} {
			wantProblem(t, s.charge(t, "k", body), http.StatusUnprocessableEntity, "order-mismatch")
		}
		if n := s.count(t, `SELECT count(*) FROM idempotency_record`) + s.count(t, `SELECT count(*) FROM payment`); n != 0 {
			t.Fatalf("rows after 422 = %d, want 0", n)
		}
	})

	t.Run("provider says it did not charge", func(t *testing.T) {
		t.Parallel()
		s := startService(t, nil)
		s.addOrder(t, 1001, 42, "100.50", "RUB")
		for range 2 {
			r := s.charge(t, "k", chargeBody(1001, 42, "100.50", "RUB", "fail_1"))
			wantProblem(t, r, http.StatusServiceUnavailable, "provider-unavailable")
			if r.header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		}
		if n := s.count(t, `SELECT count(*) FROM idempotency_record`) + s.count(t, `SELECT count(*) FROM payment`); n != 0 {
			t.Fatalf("rows after transient failures = %d, want 0 (key released)", n)
		}
		if calls := s.metric(t, `payment_provider_calls_total{outcome="not_charged",provider="sandbox"}`); calls != 2 {
			t.Fatalf("not-charged provider calls = %v, want 2", calls)
		}
		if l := s.ledger(t); len(l.Charges) != 0 || l.Counters.Faults["not_charged"] != 2 {
			t.Fatalf("ledger = %+v, want no charge and two refusals", l)
		}
	})
}

// Fail closed: with the database unreachable the answer is 503 with
// Retry-After, and the provider is never called.
func TestDatabaseUnreachableFailsClosed(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: connect fails at once.
	s := startServiceWith(t, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", nil, sandboxprovider.Config{})

	r := s.charge(t, "k", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	wantProblem(t, r, http.StatusServiceUnavailable, "service-unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if calls := s.providerCalls(t); calls != 0 {
		t.Fatalf("provider calls = %v, want 0", calls)
	}
	ready := s.request(t, http.MethodGet, "/readyz", "", nil)
	wantProblem(t, ready, http.StatusServiceUnavailable, "service-unavailable")
	if live := s.request(t, http.MethodGet, "/healthz", "", nil); live.status != http.StatusOK {
		t.Fatalf("healthz = %d, want 200 (the process is alive)", live.status)
	}
}

func TestBadRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	valid := chargeBody(1001, 42, "100.50", "RUB", "pi_1")
	long := strings.Repeat("k", 256)

	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		headers map[string]string
		status  int
		code    string
		fields  []string // for validation-failed: every field named
		detail  string   // part of the detail, after the header's name
	}{
		{name: "no auth", headers: map[string]string{"Authorization": "", "Idempotency-Key": "k"}, body: valid, status: 401, code: "unauthorized"},
		{name: "wrong key", headers: map[string]string{"Authorization": "Bearer nope", "Idempotency-Key": "k"}, body: valid, status: 401, code: "unauthorized"},
		{name: "basic auth", headers: map[string]string{"Authorization": "Basic ZGVtbzpkZW1v", "Idempotency-Key": "k"}, body: valid, status: 401, code: "unauthorized"},
		{name: "missing idempotency key", body: valid, status: 400, code: "idempotency-key-missing"},
		{name: "idempotency key too long", headers: map[string]string{"Idempotency-Key": long}, body: valid, status: 400, code: "idempotency-key-invalid"},
		{name: "idempotency key not ASCII", headers: map[string]string{"Idempotency-Key": "ключ"}, body: valid, status: 400, code: "idempotency-key-invalid"},
		// The draft's form, an RFC 8941 String: empty, unclosed, a bad
		// escape, text or parameters after it, or too long once decoded.
		{name: "idempotency key an empty string", headers: map[string]string{"Idempotency-Key": `""`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "empty"},
		{name: "idempotency key without closing quote", headers: map[string]string{"Idempotency-Key": `"k`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "closing quote"},
		{name: "idempotency key with a bad escape", headers: map[string]string{"Idempotency-Key": `"a\b"`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "backslash"},
		{name: "idempotency key with text after the string", headers: map[string]string{"Idempotency-Key": `"k"x`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "follows the closing quote"},
		{name: "idempotency key with parameters", headers: map[string]string{"Idempotency-Key": `"k";x=1`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "parameters"},
		{name: "idempotency key too long once decoded", headers: map[string]string{"Idempotency-Key": `"` + long + `"`}, body: valid, status: 400, code: "idempotency-key-invalid", detail: "longer than 255"},
		{name: "wrong content type", headers: map[string]string{"Idempotency-Key": "k", "Content-Type": "text/plain"}, body: valid, status: 415, code: "unsupported-media-type"},
		{name: "malformed JSON", headers: map[string]string{"Idempotency-Key": "k"}, body: `{"orderId": 1001,`, status: 400, code: "malformed-json"},
		{name: "JSON array", headers: map[string]string{"Idempotency-Key": "k"}, body: `[1]`, status: 400, code: "malformed-json"},
		{name: "trailing data", headers: map[string]string{"Idempotency-Key": "k"}, body: valid + `{}`, status: 400, code: "malformed-json"},
		{name: "body over 64 KiB", headers: map[string]string{"Idempotency-Key": "k"}, body: `{"externalPaymentId":"` + strings.Repeat("x", 70<<10) + `"}`, status: 413, code: "payload-too-large"},
		{name: "empty object", headers: map[string]string{"Idempotency-Key": "k"}, body: `{}`, status: 400, code: "validation-failed",
			fields: []string{"orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId"}},
		{name: "every field wrong", headers: map[string]string{"Idempotency-Key": "k"},
			body:   `{"orderId":0,"customerId":"42","amount":"-1","currency":"XYZ","paymentProvider":"paypal","externalPaymentId":"","extra":true}`,
			status: 400, code: "validation-failed",
			fields: []string{"orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "extra"}},
		{name: "amount as a JSON number", headers: map[string]string{"Idempotency-Key": "k"},
			body: `{"orderId":1001,"customerId":42,"amount":100.50,"currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_1"}`, status: 400, code: "validation-failed", fields: []string{"amount"}},
		{name: "five fraction digits", headers: map[string]string{"Idempotency-Key": "k"}, body: chargeBody(1001, 42, "100.50001", "RUB", "pi_1"), status: 400, code: "validation-failed", fields: []string{"amount"}},
		{name: "sixteen integer digits", headers: map[string]string{"Idempotency-Key": "k"}, body: chargeBody(1001, 42, "1000000000000000", "RUB", "pi_1"), status: 400, code: "validation-failed", fields: []string{"amount"}},
		{name: "exponent amount", headers: map[string]string{"Idempotency-Key": "k"}, body: chargeBody(1001, 42, "1e2", "RUB", "pi_1"), status: 400, code: "validation-failed", fields: []string{"amount"}},
		{name: "lower-case currency", headers: map[string]string{"Idempotency-Key": "k"}, body: chargeBody(1001, 42, "100.50", "rub", "pi_1"), status: 400, code: "validation-failed", fields: []string{"currency"}},
		{name: "external id too long", headers: map[string]string{"Idempotency-Key": "k"}, body: chargeBody(1001, 42, "100.50", "RUB", strings.Repeat("x", 129)), status: 400, code: "validation-failed", fields: []string{"externalPaymentId"}},
		{name: "unknown route", method: http.MethodGet, path: "/nope", status: 404, code: "not-found"},
		{name: "wrong method", method: http.MethodDelete, path: "/payments", status: 405, code: "method-not-allowed"},
		{name: "payment id not a number", method: http.MethodGet, path: "/payments/abc", status: 400, code: "validation-failed", fields: []string{"id"}},
		{name: "payment that does not exist", method: http.MethodGet, path: "/payments/999", status: 404, code: "payment-not-found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method, path := tc.method, tc.path
			if method == "" {
				method, path = http.MethodPost, "/payments"
			}
			r := s.request(t, method, path, tc.body, tc.headers)
			p := wantProblem(t, r, tc.status, tc.code)
			if tc.detail != "" && (!strings.HasPrefix(p.Detail, "The Idempotency-Key header") || !strings.Contains(p.Detail, tc.detail)) {
				t.Errorf("detail %q, want one naming the Idempotency-Key header and saying %q", p.Detail, tc.detail)
			}
			var named []string
			for _, e := range p.Errors {
				named = append(named, e.Field)
			}
			for _, f := range tc.fields {
				if !contains(named, f) {
					t.Errorf("field %q not named in %v", f, named)
				}
			}
			if tc.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record`) + s.count(t, `SELECT count(*) FROM payment`); n != 0 {
		t.Fatalf("rows written by bad requests = %d, want 0", n)
	}
	if calls := s.providerCalls(t); calls != 0 {
		t.Fatalf("provider calls = %v, want 0", calls)
	}
	// The same key is still free after all of that.
	if r := s.charge(t, "k", valid); r.status != http.StatusCreated {
		t.Fatalf("valid request with the key used by bad ones: %d %s", r.status, r.body)
	}
}

func TestHealthReadinessAndRequestID(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		r := s.request(t, http.MethodGet, path, "", map[string]string{"Authorization": ""})
		if r.status != http.StatusOK {
			t.Fatalf("%s = %d %s", path, r.status, r.body)
		}
		if r.header.Get("X-Request-Id") == "" {
			t.Fatalf("%s: no X-Request-Id", path)
		}
	}
	r := s.request(t, http.MethodGet, "/healthz", "", map[string]string{"X-Request-Id": "trace-123"})
	if got := r.header.Get("X-Request-Id"); got != "trace-123" {
		t.Fatalf("X-Request-Id = %q, want the caller's trace-123", got)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func jsonNumber(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
