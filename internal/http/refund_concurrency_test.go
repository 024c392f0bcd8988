package http_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// Thirty requests at once with one Idempotency-Key and one refund, while
// the provider takes 300 ms: one refund is made, at the provider and in the
// database, and every answer is the stored answer (the first, and replays
// byte for byte) or 409 request-in-progress with Retry-After. The same key
// with another refund, sent while the first is in flight and again after,
// is 409 idempotency-key-reused each time, and stores and makes nothing.
func TestConcurrentIdenticalRefundsRefundOnce(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 300 * time.Millisecond})
	payment := s.paidPayment(t, 601, "100.00")
	body := refundBody("30.00", "r-same")
	other := refundBody("31.00", "r-same") // another amount: another command under the key

	const n, reused = 30, 5
	answers := make([]response, n)
	reusedAnswers := make([]response, reused)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = s.refund(t, payment, "same-refund-key", body)
		})
	}
	close(start)
	// Once the key is claimed (the first request is at the provider, or
	// done), the other refund under it.
	waitForCount(t, s, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'same-refund-key'`)
	for i := range reused {
		wg.Go(func() { reusedAnswers[i] = s.refund(t, payment, "same-refund-key", other) })
	}
	wg.Wait()

	stored := tallyIdenticalAnswers(t, answers).stored
	after := s.refund(t, payment, "same-refund-key", other)
	for i, a := range append(reusedAnswers, after) {
		if a.status != http.StatusConflict || problemCode(t, a.body) != "idempotency-key-reused" {
			t.Errorf("the other refund under the key (%d): %d %s, want 409 idempotency-key-reused", i, a.status, a.body)
		}
	}
	if again := s.refund(t, payment, "same-refund-key", body); again.status != http.StatusCreated || !bytes.Equal(again.body, stored) {
		t.Errorf("the refund again: %d %s, want the stored answer", again.status, again.body)
	}

	// One refund, at the provider and here, with its amount counted once.
	ledger := s.ledger(t)
	var atProvider []sandboxprovider.Refund
	for _, r := range ledger.Refunds {
		if r.Reference == "r-same" {
			atProvider = append(atProvider, r)
		}
	}
	if len(atProvider) != 1 || atProvider[0].Status != sandboxprovider.StatusSucceeded || atProvider[0].Amount.StringFixed(2) != "30.00" {
		t.Fatalf("the provider's refunds of r-same: %+v, want one of 30.00", atProvider)
	}
	if got := ledger.RefundCounters.Requests; got != 1 {
		t.Errorf("the provider was asked for a refund %d times, want once", got)
	}
	for query, want := range map[string]int{
		`SELECT count(*) FROM refund`: 1,
		`SELECT count(*) FROM refund WHERE external_refund_id = 'r-same' AND amount = 30 AND status = 'SUCCEEDED'`:   1,
		fmt.Sprintf(`SELECT count(*) FROM payment WHERE id = %d AND refund_reserved = 30`, payment):                  1,
		`SELECT count(*) FROM idempotency_record WHERE command = 'refund'`:                                           1,
		`SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'same-refund-key' AND status = 'COMPLETED'`: 1,
		`SELECT count(*) FROM outbox_event WHERE event_type LIKE 'Refund%' OR event_type = 'PaymentRefunded.v1'`:     1,
	} {
		if got := s.count(t, query); got != want {
			t.Errorf("%s = %d, want %d", query, got, want)
		}
	}
}

// waitForCount returns once query counts a row; it fails the test if none
// comes within a minute.
func waitForCount(t *testing.T, s *testService, query string) {
	t.Helper()
	for range 12000 {
		if s.count(t, query) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s: nothing within a minute", query)
}

// identicalAnswers are the answers to identical requests sent at once with
// one key.
type identicalAnswers struct {
	created, replayed, inProgress int
	stored                        []byte // the answer made, which the replays repeat
}

// tallyIdenticalAnswers checks the answers to identical requests sent at
// once with one key: exactly one is made (201), every other is a replay of
// its bytes or 409 request-in-progress with Retry-After, and at least one
// met the key in progress (or the test did not exercise concurrency).
func tallyIdenticalAnswers(t *testing.T, answers []response) identicalAnswers {
	t.Helper()
	var a identicalAnswers
	for _, r := range answers {
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
			a.replayed++
		case r.status == http.StatusCreated:
			a.created++
			a.stored = r.body
		case r.status == http.StatusConflict:
			wantProblem(t, r, http.StatusConflict, "request-in-progress")
			if r.header.Get("Retry-After") == "" {
				t.Fatal("409 request-in-progress without Retry-After")
			}
			a.inProgress++
		default:
			t.Fatalf("unexpected response %d %s", r.status, r.body)
		}
	}
	if a.created != 1 || a.inProgress+a.replayed != len(answers)-1 {
		t.Fatalf("created=%d inProgress=%d replayed=%d, want 1 created, the rest replayed or in progress", a.created, a.inProgress, a.replayed)
	}
	if a.inProgress == 0 {
		t.Fatal("no request met the key in progress: the test did not exercise concurrency")
	}
	for _, r := range answers {
		if r.status == http.StatusCreated && !bytes.Equal(r.body, a.stored) {
			t.Fatalf("a replay differs from the answer made: %s, want %s", r.body, a.stored)
		}
	}
	return a
}
