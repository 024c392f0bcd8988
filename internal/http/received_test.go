package http_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// Modifications received and decided later, against the sandbox in its
// received mode, over HTTP: a capture, void or refund is answered 202
// with the pending resource, stored and replayed as such; it holds what
// it reserved until the provider's event (delivered by the sandbox to the
// service, signed) settles it; nothing is guessed.

// receivedSandbox is the sandbox in its received mode, its webhooks
// delivered to the service: it decides only when the test says so
// (DecideReceived), unless delay is set.
func receivedSandbox(delay time.Duration) sandboxprovider.Config {
	if delay == 0 {
		delay = time.Hour
	}
	return sandboxprovider.Config{Modifications: sandboxprovider.ModificationsReceived, ModificationDelay: delay,
		Webhooks: sandboxprovider.WebhookConfig{Secret: webhookSecret, FirstRetry: 20 * time.Millisecond, MaxRetry: 200 * time.Millisecond,
			RetryFor: time.Minute, Timeout: 5 * time.Second, LateDelay: time.Second}}
}

// startReceived runs the service against the sandbox in its received
// mode with env over the defaults.
func startReceived(t *testing.T, env map[string]string, provider sandboxprovider.Config) *testService {
	t.Helper()
	return startServiceWith(t, testdb.New(t), env, provider)
}

// pending is a 202's pending resource, as much as the tests read.
type pending struct {
	ID        int64  `json:"id"`
	PaymentID int64  `json:"paymentId"`
	Kind      string `json:"kind"`
	Amount    string `json:"amount"`
	Status    string `json:"status"`
}

// received checks that r is a 202 with a PENDING resource and a Location
// that names it under its payment's collection, and returns it.
func received(t *testing.T, r response, collection string) pending {
	t.Helper()
	var p pending
	if r.status != http.StatusAccepted || json.Unmarshal(r.body, &p) != nil || p.Status != "PENDING" || p.ID == 0 {
		t.Fatalf("want 202 with a PENDING resource; got %d %s", r.status, r.body)
	}
	if want := fmt.Sprintf("/payments/%d/%s/%d", p.PaymentID, collection, p.ID); r.header.Get("Location") != want {
		t.Fatalf("Location %q, want %q", r.header.Get("Location"), want)
	}
	return p
}

// statusAt is the status GET answers for a pending resource's Location.
func (s *testService) statusAt(t *testing.T, location string) string {
	t.Helper()
	r := s.request(t, http.MethodGet, location, "", nil)
	var p pending
	if r.status != http.StatusOK || json.Unmarshal(r.body, &p) != nil {
		t.Fatalf("GET %s: %d %s", location, r.status, r.body)
	}
	return p.Status
}

// settledAt waits (20 s at most) until the resource at location is no
// longer PENDING, and returns its status.
func (s *testService) settledAt(t *testing.T, location string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st := s.statusAt(t, location); st != "PENDING" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still PENDING after 20s", location)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replaysAsItWas sends the request again and checks that its answer is
// first, byte for byte, replayed.
func replaysAsItWas(t *testing.T, again, first response) {
	t.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" ||
		again.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("the replay: %d %s (Location %q, replayed %q); want the first answer %d %s (Location %q)", again.status, again.body,
			again.header.Get("Location"), again.header.Get("Idempotent-Replayed"), first.status, first.body, first.header.Get("Location"))
	}
}

// A capture the provider received: 202 with the PENDING capture, replayed
// byte for byte; meanwhile the payment is AUTHORIZED, a void is refused
// and no event is announced. Its event settles it: the capture SUCCEEDED,
// the payment SUCCEEDED with what was captured, one PaymentCaptured.v1;
// the key still answers its 202.
func TestAReceivedCaptureIsSettledByItsEvent(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	id := s.authorize(t, 11001, "100.00", "pi_rcv_capture")
	body := captureBody("60.00", "RUB", "cap_rcv")
	first := s.capture(t, id, "rcv-cap", body)
	c := received(t, first, "captures")
	if c.Kind != "capture" || c.Amount != "60.00" || c.PaymentID != id {
		t.Fatalf("the pending capture: %+v", c)
	}
	location := first.header.Get("Location")
	replaysAsItWas(t, s.capture(t, id, "rcv-cap", body), first)
	if st := s.statusAt(t, location); st != "PENDING" {
		t.Fatalf("the capture before the provider decided: %s", st)
	}
	if p := s.paymentStatus(t, id); p != "AUTHORIZED" {
		t.Fatalf("the payment while its capture is received: %s", p)
	}
	if v := s.void(t, id, "void-meanwhile"); v.status != http.StatusConflict || paymentOf(t, v).Code != "payment-transition-in-progress" {
		t.Fatalf("a void while the capture is received: %d %s", v.status, v.body)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type LIKE 'Capture%' OR event_type = 'PaymentCaptured.v1'`); n != 0 {
		t.Fatalf("%d capture events before the provider decided", n)
	}

	if n := s.provider.DecideReceived(); n != 1 {
		t.Fatalf("the provider decided %d received modifications, want 1", n)
	}
	if st := s.settledAt(t, location); st != "SUCCEEDED" {
		t.Fatalf("the capture once decided: %s", st)
	}
	if p := paymentOf(t, s.request(t, http.MethodGet, fmt.Sprintf("/payments/%d", id), "", nil)); p.Status != "SUCCEEDED" || p.CapturedAmount != "60.00" {
		t.Fatalf("the payment once captured: %+v", p)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentCaptured.v1'`); n != 1 {
		t.Fatalf("%d PaymentCaptured.v1 events, want 1", n)
	}
	replaysAsItWas(t, s.capture(t, id, "rcv-cap", body), first)
	if net := s.provider.NetCaptured("pi_rcv_capture"); net.Captures != 1 || len(net.Violations) > 0 {
		t.Fatalf("the provider's ledger: %+v", net)
	}
}

// paymentStatus reads a payment's status from the table.
func (s *testService) paymentStatus(t *testing.T, id int64) string {
	t.Helper()
	var status string
	if err := s.db.QueryRow(t.Context(), `SELECT status FROM payment WHERE id = $1`, id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	return status
}

// A received capture the provider then fails: FAILED, one
// CaptureFailed.v1, the payment AUTHORIZED, and the money free again for
// a capture under a new key, which the provider makes.
func TestAReceivedCaptureThatFailsLeavesThePaymentAuthorized(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	id := s.authorize(t, 11002, "80.00", "pi_rcv_fail")
	first := s.capture(t, id, "rcv-fail", captureBody("80.00", "RUB", "modfail_cap"))
	received(t, first, "captures")
	s.provider.DecideReceived()
	if st := s.settledAt(t, first.header.Get("Location")); st != "FAILED" {
		t.Fatalf("the failed capture: %s", st)
	}
	if p := s.paymentStatus(t, id); p != "AUTHORIZED" {
		t.Fatalf("the payment after a failed capture: %s", p)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'CaptureFailed.v1'`); n != 1 {
		t.Fatalf("%d CaptureFailed.v1 events, want 1", n)
	}
	second := s.capture(t, id, "rcv-again", captureBody("80.00", "RUB", "cap_again"))
	received(t, second, "captures")
	s.provider.DecideReceived()
	if st := s.settledAt(t, second.header.Get("Location")); st != "SUCCEEDED" {
		t.Fatalf("the second capture: %s", st)
	}
	if p := s.paymentStatus(t, id); p != "SUCCEEDED" {
		t.Fatalf("the payment after the second capture: %s", p)
	}
	if net := s.provider.NetCaptured("pi_rcv_fail"); net.Captures != 1 || net.Captured.String() != "80" {
		t.Fatalf("the provider's ledger: %+v", net)
	}
}

// A received void, settled by its event: the payment VOIDED, its order
// free.
func TestAReceivedVoidIsSettledByItsEvent(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	id := s.authorize(t, 11003, "30.00", "pi_rcv_void")
	first := s.void(t, id, "rcv-void")
	if v := received(t, first, "voids"); v.Kind != "void" || v.Amount != "" {
		t.Fatalf("the pending void: %s", first.body)
	}
	s.provider.DecideReceived()
	if st := s.settledAt(t, first.header.Get("Location")); st != "SUCCEEDED" {
		t.Fatalf("the void: %s", st)
	}
	if p := s.paymentStatus(t, id); p != "VOIDED" {
		t.Fatalf("the payment after its void: %s", p)
	}
	if r := s.charge(t, "after-void", chargeBody(11003, 42, "30.00", "RUB", "pi_rcv_after_void")); r.status != http.StatusCreated {
		t.Fatalf("a new charge of the voided order: %d %s", r.status, r.body)
	}
}

// A received refund holds its amount until its event: a second refund
// that does not fit beside it is refused; the provider fails it, and its
// amount is given back (refund_reserved), for a refund that fits and is
// made.
func TestAReceivedRefundThatFailsGivesItsAmountBack(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	id := s.paidPayment(t, 11004, "100.00")
	first := s.refund(t, id, "rcv-refund", refundBody("100.00", "modfail_re"))
	rf := received(t, first, "refunds")
	if rf.Amount != "100.00" {
		t.Fatalf("the pending refund: %s", first.body)
	}
	replaysAsItWas(t, s.refund(t, id, "rcv-refund", refundBody("100.00", "modfail_re")), first)
	if r := s.refund(t, id, "rcv-more", refundBody("1.00", "re_more")); r.status != http.StatusConflict || problemCode(t, r.body) != "refund-exceeds-payment" {
		t.Fatalf("a refund beside the received one: %d %s", r.status, r.body)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = 100`, id); n != 1 {
		t.Fatal("the received refund's amount is not reserved")
	}
	s.provider.DecideReceived()
	if st := s.settledAt(t, first.header.Get("Location")); st != "FAILED" {
		t.Fatalf("the failed refund: %s", st)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = 0`, id); n != 1 {
		t.Fatal("the failed refund's amount was not given back")
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'RefundFailed.v1'`); n != 1 {
		t.Fatalf("%d RefundFailed.v1 events, want 1", n)
	}
	second := s.refund(t, id, "rcv-refund-2", refundBody("100.00", "re_whole"))
	received(t, second, "refunds")
	s.provider.DecideReceived()
	if st := s.settledAt(t, second.header.Get("Location")); st != "SUCCEEDED" {
		t.Fatalf("the second refund: %s", st)
	}
	if _, total := s.ledger(t).Refunded(fmt.Sprintf("pay-%d", 11004)); total.String() != "100" {
		t.Fatalf("the provider refunded %s, want 100", total)
	}
	replaysAsItWas(t, s.refund(t, id, "rcv-refund", refundBody("100.00", "modfail_re")), first)
}

// Twenty identical captures at once: each gets the key's 202, byte for
// byte, or 409 request-in-progress; the provider received one.
func TestIdenticalReceivedCapturesGetThe202OrInProgress(t *testing.T) {
	t.Parallel()
	s := startReceived(t, nil, receivedSandbox(0))
	id := s.authorize(t, 11005, "50.00", "pi_rcv_same")
	body := captureBody("50.00", "RUB", "cap_same")
	answers := make([]response, identicalCopies)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = s.capture(t, id, "rcv-same", body) })
	}
	wg.Wait()
	var stored response
	for _, a := range answers {
		if a.status == http.StatusAccepted {
			stored = a
		}
	}
	if stored.status != http.StatusAccepted {
		t.Fatal("no copy got the 202")
	}
	for _, a := range answers {
		switch {
		case a.status == http.StatusAccepted && bytes.Equal(a.body, stored.body) && a.header.Get("Location") == stored.header.Get("Location"):
		case a.status == http.StatusConflict && codeOf(a) == "request-in-progress" && a.header.Get("Retry-After") != "":
		default:
			t.Errorf("a copy got %d %s", a.status, a.body)
		}
	}
	if l := s.ledger(t); l.CaptureCounters.Received != 1 {
		t.Fatalf("the provider received %d captures, want 1", l.CaptureCounters.Received)
	}
}

// identicalCopies is how many identical requests are sent at once.
const identicalCopies = 20

// The event of a received modification delivered twice, late, never (the
// completer's lookup settles it), or before the 202 is recorded (its
// answer comes back after the event settled it: the key answers the
// outcome): each settles it once, with one event, and nothing contradicts.
func TestReceivedEventsTwiceLateLostOrFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ref  string
		env  map[string]string
		// first, when set, sends the capture and decides it before its
		// answer comes: the outcome is the key's answer.
		first bool
	}{
		{name: "twice", ref: "hookdup_cap"},
		{name: "late", ref: "hooklate_cap"},
		{name: "lost", ref: "hooklost_cap", env: map[string]string{"CHARGE_COMPLETER_CRON": "* * * * * *", "RECEIVED_LOOKUP_AFTER": "0s"}},
		{name: "before the 202", ref: "slow_cap", first: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := receivedSandbox(0)
			cfg.SlowDelay = 2 * time.Second
			s := startReceived(t, tc.env, cfg)
			id := s.authorize(t, 11010, "40.00", "pi_rcv_"+tc.ref)
			body := captureBody("40.00", "RUB", tc.ref)
			var location string
			if tc.first {
				done := make(chan response, 1)
				go func() { done <- s.capture(t, id, "rcv-hook", body) }()
				deadline := time.Now().Add(10 * time.Second)
				for s.provider.Undecided() == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the provider did not receive the capture")
					}
					time.Sleep(10 * time.Millisecond)
				}
				s.provider.DecideReceived()
				r := <-done
				if p := paymentOf(t, r); r.status != http.StatusCreated || p.Status != "SUCCEEDED" {
					t.Fatalf("the capture's answer after its event: %d %s, want the recorded 201", r.status, r.body)
				}
				replaysAsItWas(t, s.capture(t, id, "rcv-hook", body), r)
			} else {
				r := s.capture(t, id, "rcv-hook", body)
				received(t, r, "captures")
				location = r.header.Get("Location")
				s.provider.DecideReceived()
				if st := s.settledAt(t, location); st != "SUCCEEDED" {
					t.Fatalf("the capture: %s", st)
				}
			}
			// Every delivery made: the event once in processed_event, the
			// outcome once in the outbox.
			deadline := time.Now().Add(20 * time.Second)
			for s.provider.WebhookCounters().Pending > 0 {
				if time.Now().After(deadline) {
					t.Fatal("webhook deliveries still pending after 20s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentCaptured.v1'`); n != 1 {
				t.Fatalf("%d PaymentCaptured.v1 events, want 1", n)
			}
			if n := s.count(t, `SELECT count(*) FROM provider_event_contradiction`); n != 0 {
				t.Fatalf("%d contradictions", n)
			}
			w := s.provider.WebhookCounters()
			lost := w.Faults[sandboxprovider.WebhookLost]
			if n := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer_name = 'webhook:sandbox'`); n != w.Events-lost {
				t.Fatalf("%d events processed, want %d (%+v)", n, w.Events-lost, w)
			}
			if p := s.paymentStatus(t, id); p != "SUCCEEDED" {
				t.Fatalf("the payment: %s", p)
			}
		})
	}
}

// A payment whose capture the provider received is never expired by the
// expiry job, even when the provider says its hold lapsed meanwhile: the
// capture holds it. The provider then fails the capture (the hold is
// gone), and the next run records the lapse.
func TestAReceivedCaptureKeepsThePaymentFromTheExpiryJob(t *testing.T) {
	t.Parallel()
	cfg := receivedSandbox(0)
	cfg.AuthorizationTTL = 2 * time.Second
	s := startReceived(t, map[string]string{"CHARGE_COMPLETER_CRON": "* * * * * *", "AUTHORIZATION_CHECK_AFTER": "0s"}, cfg)
	id := s.authorize(t, 11020, "20.00", "pi_rcv_lapse")
	first := s.capture(t, id, "rcv-lapse", captureBody("20.00", "RUB", "cap_lapse"))
	received(t, first, "captures")
	// The hold lapses at the provider, and the completer runs twice after.
	deadline := time.Now().Add(20 * time.Second)
	for a, _ := s.provider.LookupAuthorization("sandbox:pi_rcv_lapse"); a.Hold != sandboxprovider.HoldExpired; a, _ = s.provider.LookupAuthorization("sandbox:pi_rcv_lapse") {
		if time.Now().After(deadline) {
			t.Fatalf("the hold did not lapse: %+v", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runs := s.metric(t, `payment_job_runs_total{job="complete-abandoned-charges",outcome="ok"}`)
	for s.metric(t, `payment_job_runs_total{job="complete-abandoned-charges",outcome="ok"}`) < runs+2 {
		if time.Now().After(deadline) {
			t.Fatal("the completer did not run")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p := s.paymentStatus(t, id); p != "AUTHORIZED" {
		t.Fatalf("the payment with a received capture, its hold lapsed: %s", p)
	}
	s.provider.DecideReceived()
	if st := s.settledAt(t, first.header.Get("Location")); st != "FAILED" {
		t.Fatalf("the capture of a lapsed hold: %s", st)
	}
	for s.paymentStatus(t, id) != "EXPIRED" {
		if time.Now().After(deadline) {
			t.Fatal("the lapse is not recorded once the capture failed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
