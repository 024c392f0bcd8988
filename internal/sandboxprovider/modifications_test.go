package sandboxprovider_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// startReceived starts a provider in the received mode that sends its
// webhooks to r; delay is the modifications' (an hour: only
// DecideReceived decides them).
func startReceived(t *testing.T, r *receiver, delay time.Duration, failureRate float64) *sandboxprovider.Server {
	t.Helper()
	return start(t, sandboxprovider.Config{Seed: 7, Modifications: sandboxprovider.ModificationsReceived,
		ModificationDelay: delay, ModificationFailureRate: failureRate,
		Webhooks: sandboxprovider.WebhookConfig{URL: r.URL, Secret: testSecret, FirstRetry: 20 * time.Millisecond, RetryFor: 10 * time.Second, Timeout: 2 * time.Second}})
}

// decided is an answer's or a lookup's object, as much as the tests read.
type decided struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	Status         string `json:"status"`
	FailureReason  string `json:"failureReason"`
}

func decidedOf(t *testing.T, body string) decided {
	t.Helper()
	var d decided
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	return d
}

// In the received mode a capture, a refund and a void are answered 202
// "received", the same bytes on every request under the key; the lookup
// answers the receipt until the decision, then the decision, which only
// an event announces: made, declined (decline_), or failed, by its
// reference (modfail_), at the failure rate, or because what would have
// refused it at once stood in the way when it was decided. A failure
// moves nothing: the hold stays active, the charge keeps what it had to
// refund.
func TestReceivedModificationsAreDecidedLater(t *testing.T) {
	t.Parallel()
	type request struct{ path, key, body string }
	captureOf := func(key, auth, amount, ref string) request {
		return request{"/v1/captures", key, `{"authorization":"` + auth + `","amount":"` + amount + `","currency":"RUB","reference":"` + ref + `"}`}
	}
	voidOf := func(key, auth, ref string) request {
		return request{"/v1/voids", key, `{"authorization":"` + auth + `","reference":"` + ref + `"}`}
	}
	refundOf := func(key, charge, amount, ref string) request {
		return request{"/v1/refunds", key, `{"charge":"` + charge + `","amount":"` + amount + `","currency":"RUB","reference":"` + ref + `"}`}
	}
	tests := []struct {
		name        string
		failureRate float64
		req         request
		// before runs before req; after checks the provider once it is
		// decided.
		before  func(t *testing.T, s *sandboxprovider.Server)
		status  sandboxprovider.ChargeStatus
		failure string // in the failure's reason
		hold    sandboxprovider.HoldState
	}{
		{name: "a capture made", req: captureOf("c1", "a1", "60.00", "cp_1"), status: sandboxprovider.StatusSucceeded, hold: sandboxprovider.HoldCaptured},
		{name: "a capture declined", req: captureOf("c1", "a1", "60.00", "decline_cp"), status: sandboxprovider.StatusDeclined, hold: sandboxprovider.HoldActive},
		{name: "a capture failed by its reference", req: captureOf("c1", "a1", "60.00", "modfail_cp"),
			status: sandboxprovider.StatusFailed, failure: "asks for a failure", hold: sandboxprovider.HoldActive},
		{name: "a capture failed at the failure rate", failureRate: 1, req: captureOf("c1", "a1", "60.00", "cp_1"),
			status: sandboxprovider.StatusFailed, failure: "failure rate", hold: sandboxprovider.HoldActive},
		{name: "a capture above the hold fails", req: captureOf("c1", "a1", "1000.01", "cp_1"),
			status: sandboxprovider.StatusFailed, failure: "holds", hold: sandboxprovider.HoldActive},
		{name: "a capture of a hold voided meanwhile fails", req: captureOf("c1", "a1", "60.00", "cp_1"),
			before: func(t *testing.T, s *sandboxprovider.Server) {
				// The void is received first, and so decided first.
				if a := void(t, s, "v0", "a1", "vo_0", 5*time.Second); a.status != http.StatusAccepted {
					t.Fatalf("void: %+v", a)
				}
			},
			status: sandboxprovider.StatusFailed, failure: "voided", hold: sandboxprovider.HoldVoided},
		{name: "a void made", req: voidOf("v1", "a1", "vo_1"), status: sandboxprovider.StatusSucceeded, hold: sandboxprovider.HoldVoided},
		{name: "a void failed by its reference", req: voidOf("v1", "a1", "modfail_vo"),
			status: sandboxprovider.StatusFailed, failure: "asks for a failure", hold: sandboxprovider.HoldActive},
		{name: "a refund made", req: refundOf("r1", "ch1", "40.00", "re_1"), status: sandboxprovider.StatusSucceeded, hold: sandboxprovider.HoldActive},
		{name: "a refund above what the charge has left fails", req: refundOf("r1", "ch1", "100.01", "re_1"),
			status: sandboxprovider.StatusFailed, failure: "left to refund", hold: sandboxprovider.HoldActive},
		{name: "a refund declined", req: refundOf("r1", "ch1", "40.00", "decline_re"), status: sandboxprovider.StatusDeclined, hold: sandboxprovider.HoldActive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, always(http.StatusOK))
			s := startReceived(t, r, time.Hour, tc.failureRate)
			held(t, s, "a1")
			// A charge is decided at once in the received mode too.
			if c := create(t, s, "ch1", "100.00", "pi_1", 5*time.Second); c.status != http.StatusOK || decidedOf(t, c.body).Status != "succeeded" {
				t.Fatalf("a charge: %+v, want 200 succeeded", c)
			}
			if tc.before != nil {
				tc.before(t, s)
			}
			first := post(t, s.URL+tc.req.path, tc.req.key, tc.req.body, 5*time.Second)
			got := decidedOf(t, first.body)
			if first.status != http.StatusAccepted || got.Status != "received" || got.IdempotencyKey != tc.req.key || got.ID == "" {
				t.Fatalf("first answer: %+v, want 202 received with an id", first)
			}
			if again := post(t, s.URL+tc.req.path, tc.req.key, tc.req.body, 5*time.Second); again.status != http.StatusAccepted || !again.replayed || again.body != first.body {
				t.Fatalf("the same request again: %+v, want the receipt, replayed", again)
			}
			if l := lookupBody(t, s, tc.req.path, tc.req.key); l+"\n" != first.body {
				t.Fatalf("lookup before the decision: %s, want the receipt %s", l, first.body)
			}
			if n := s.Undecided(); n < 1 {
				t.Fatalf("undecided: %d", n)
			}
			s.DecideReceived()
			after := lookupBody(t, s, tc.req.path, tc.req.key)
			d := decidedOf(t, after)
			if d.Status != string(tc.status) || d.ID != got.ID || !strings.Contains(d.FailureReason, tc.failure) || (tc.failure == "") != (d.FailureReason == "") {
				t.Fatalf("lookup after the decision: %s, want %s (failure %q) under the receipt's id %s", after, tc.status, tc.failure, got.ID)
			}
			if replay := post(t, s.URL+tc.req.path, tc.req.key, tc.req.body, 5*time.Second); replay.status != http.StatusAccepted || replay.body != first.body {
				t.Fatalf("the request after the decision: %+v, want the receipt again", replay)
			}
			quiet(t, s, 5*time.Second)
			var events []string
			for _, a := range r.delivered() {
				var obj decided
				_ = json.Unmarshal(a.event.Data, &obj)
				if obj.IdempotencyKey == tc.req.key {
					events = append(events, a.event.Type)
					if string(a.event.Data) != after {
						t.Errorf("event %s data %s, want the lookup's %s", a.event.Type, a.event.Data, after)
					}
				}
			}
			noun := strings.TrimSuffix(strings.TrimPrefix(tc.req.path, "/v1/"), "s")
			if len(events) != 1 || events[0] != noun+"."+string(tc.status) {
				t.Fatalf("events of %s: %v, want one %s.%s", tc.req.key, events, noun, tc.status)
			}
			if st := holdOf(t, s, "a1"); st.Hold != tc.hold {
				t.Fatalf("the hold: %s, want %s", st.Hold, tc.hold)
			}
			l := s.Ledger()
			if l.Undecided != 0 {
				t.Fatalf("undecided after DecideReceived: %d", l.Undecided)
			}
			received := l.CaptureCounters.Received + l.VoidCounters.Received + l.RefundCounters.Received
			failures := l.CaptureCounters.Failures + l.VoidCounters.Failures + l.RefundCounters.Failures
			if wantReceived := 1 + btoi(tc.before != nil); received != wantReceived || (failures == 1) != (tc.status == sandboxprovider.StatusFailed) {
				t.Fatalf("counters: %d received (want %d), %d failures", received, wantReceived, failures)
			}
		})
	}
}

// Without DecideReceived, a received modification is decided by its
// timer, ModificationDelay after its receipt; the mode leaves charges and
// authorizations alone.
func TestReceivedModificationsAreDecidedAfterTheDelay(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, always(http.StatusOK))
	s := startReceived(t, r, 50*time.Millisecond, 0)
	held(t, s, "a1")
	if a := capture(t, s, "c1", "a1", "10.00", "cp_1", 5*time.Second); a.status != http.StatusAccepted {
		t.Fatalf("capture: %+v", a)
	}
	deadline := time.Now().Add(5 * time.Second)
	for decidedOf(t, lookupBody(t, s, "/v1/captures", "c1")).Status != "succeeded" {
		if time.Now().After(deadline) {
			t.Fatalf("the capture is not decided 5s after its receipt: %s", lookupBody(t, s, "/v1/captures", "c1"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.Undecided(); n != 0 {
		t.Fatalf("undecided: %d", n)
	}
	if net := s.NetCaptured("pa_a1"); net.Captures != 1 || len(net.Violations) > 0 {
		t.Fatalf("the ledger: %+v", net)
	}
}
