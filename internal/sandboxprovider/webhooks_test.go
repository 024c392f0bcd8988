package sandboxprovider_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/webhooksig"
)

const testSecret = "whsec_test"

// arrival is one delivery as the receiver saw it.
type arrival struct {
	event sandboxprovider.Event
	body  string
	at    time.Time
}

// receiver is a real HTTP endpoint that verifies every delivery's
// signature with webhooksig.Verify and records it. answer decides each
// attempt's answer by its number (1 for the first attempt the receiver
// sees) and its number among its event's: a status, or 0 to drop the
// connection without one.
type receiver struct {
	*httptest.Server
	t      *testing.T
	answer func(n, ofEvent int) int

	mu       sync.Mutex
	attempts int
	ofEvent  map[string]int // attempts by event id
	got      []arrival      // the attempts answered 2xx, in order
	all      []arrival      // every attempt
}

func newReceiver(t *testing.T, answer func(n, ofEvent int) int) *receiver {
	r := &receiver{t: t, answer: answer, ofEvent: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func always(status int) func(int, int) int { return func(int, int) int { return status } }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if err := webhooksig.Verify(req.Header.Get(webhooksig.Header), body, [][]byte{[]byte(testSecret)}, time.Now(), time.Minute); err != nil {
		r.t.Errorf("a delivery's signature: %v", err)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/json" {
		r.t.Errorf("Content-Type %q", ct)
	}
	var ev sandboxprovider.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		r.t.Errorf("a delivery's body %q: %v", body, err)
	}
	a := arrival{event: ev, body: string(body), at: time.Now()}
	r.mu.Lock()
	r.attempts++
	r.ofEvent[ev.ID]++
	r.all = append(r.all, a)
	status := r.answer(r.attempts, r.ofEvent[ev.ID])
	if status >= 200 && status < 300 {
		r.got = append(r.got, a)
	}
	r.mu.Unlock()
	if status == 0 {
		panic(http.ErrAbortHandler) // the connection closes with no answer
	}
	w.WriteHeader(status)
}

// delivered returns the deliveries answered 2xx so far.
func (r *receiver) delivered() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *receiver) every() []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// startWithWebhooks starts a provider that sends its webhooks to r, with
// short retries.
func startWithWebhooks(t *testing.T, r *receiver, w sandboxprovider.WebhookConfig) *sandboxprovider.Server {
	w.URL, w.Secret = r.URL, testSecret
	if w.FirstRetry == 0 {
		w.FirstRetry = 20 * time.Millisecond
	}
	if w.RetryFor == 0 {
		w.RetryFor = 10 * time.Second
	}
	if w.Timeout == 0 {
		w.Timeout = 2 * time.Second
	}
	return start(t, sandboxprovider.Config{Webhooks: w, Seed: 7})
}

// quiet waits until the provider has no delivery pending and returns its
// webhook counters.
func quiet(t *testing.T, s *sandboxprovider.Server, within time.Duration) sandboxprovider.WebhookCounters {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := s.WebhookCounters()
		if c.Pending == 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries still pending after %s: %+v", within, c)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lookupBody is what GET ?idempotency_key= answers for key, without the
// final newline.
func lookupBody(t *testing.T, s *sandboxprovider.Server, path, key string) string {
	t.Helper()
	resp, err := http.Get(s.URL + path + "?idempotency_key=" + key)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSuffix(string(b), "\n")
}

// Every decision (a charge succeeded or declined, a refund succeeded or
// declined) is one event, delivered once, signed, whose data is the object
// exactly as the lookup answers it; a refusal makes none.
func TestEveryDecisionIsDelivered(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, always(http.StatusOK))
	s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{})
	create(t, s, "ck", "100.00", "pi_1", 5*time.Second)
	create(t, s, "dk", "5.00", "decline_1", 5*time.Second)
	refund(t, s, "rk", "ck", "30.00", "re_1", 5*time.Second)
	refund(t, s, "rd", "ck", "1.00", "decline_r", 5*time.Second)
	refund(t, s, "rx", "ck", "999.00", "re_too_much", 5*time.Second) // refused: no decision
	create(t, s, "ck", "100.00", "pi_1", 5*time.Second)              // a replay: no new decision

	c := quiet(t, s, 10*time.Second)
	want := map[string]struct{ typ, data string }{
		"ck": {"charge.succeeded", lookupBody(t, s, "/v1/charges", "ck")},
		"dk": {"charge.declined", lookupBody(t, s, "/v1/charges", "dk")},
		"rk": {"refund.succeeded", lookupBody(t, s, "/v1/refunds", "rk")},
		"rd": {"refund.declined", lookupBody(t, s, "/v1/refunds", "rd")},
	}
	got := r.delivered()
	ids := map[string]bool{}
	for _, a := range got {
		var obj struct {
			IdempotencyKey string `json:"idempotencyKey"`
		}
		_ = json.Unmarshal(a.event.Data, &obj)
		w, ok := want[obj.IdempotencyKey]
		if !ok || a.event.Type != w.typ || string(a.event.Data) != w.data {
			t.Errorf("event %s %s data %s; want %s %s", a.event.ID, a.event.Type, a.event.Data, w.typ, w.data)
		}
		if !strings.HasPrefix(a.event.ID, "evt_") || ids[a.event.ID] || a.event.Created.IsZero() {
			t.Errorf("event id %q (seen before: %v), created %s", a.event.ID, ids[a.event.ID], a.event.Created)
		}
		ids[a.event.ID] = true
		delete(want, obj.IdempotencyKey)
	}
	if len(got) != 4 || len(want) != 0 {
		t.Errorf("%d deliveries, decisions without one: %v", len(got), want)
	}
	if c.Events != 4 || c.Deliveries != 4 || c.Attempts != 4 || c.Retries != 0 || c.Expired != 0 {
		t.Errorf("counters %+v, want 4 events, 4 deliveries in 4 attempts", c)
	}
	if l := s.Ledger(); l.Webhooks.Events != 4 {
		t.Errorf("the ledger's webhooks: %+v", l.Webhooks)
	}
}

// A delivery answered with anything but 2xx, or with no answer, is retried
// with the same id and the same bytes until it is answered 2xx.
func TestFailedDeliveriesAreRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer func(n, ofEvent int) int
	}{
		{"500 twice", func(n, _ int) int { return map[bool]int{true: 500, false: 200}[n <= 2] }},
		{"connection dropped twice", func(n, _ int) int { return map[bool]int{true: 0, false: 204}[n <= 2] }},
		{"404 twice, as for an object the service does not know yet", func(n, _ int) int { return map[bool]int{true: 404, false: 200}[n <= 2] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, tc.answer)
			s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{})
			create(t, s, "ck", "1.00", "pi_1", 5*time.Second)
			c := quiet(t, s, 10*time.Second)
			all := r.every()
			if len(all) != 3 || len(r.delivered()) != 1 {
				t.Fatalf("%d attempts, %d delivered; want 3 and 1", len(all), len(r.delivered()))
			}
			for _, a := range all[1:] {
				if a.body != all[0].body {
					t.Errorf("a retry's body %s differs from the first %s", a.body, all[0].body)
				}
			}
			if c.Events != 1 || c.Deliveries != 1 || c.Attempts != 3 || c.Retries != 2 || c.Expired != 0 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// Retries stop at RetryFor after the event was made: a receiver that
// never answers 2xx sees no attempt after it, and the delivery is counted
// as expired. The pauses grow: fewer attempts than the bound would allow
// at the first pause.
func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, always(http.StatusInternalServerError))
	retryFor := 1500 * time.Millisecond
	s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{RetryFor: retryFor, FirstRetry: 20 * time.Millisecond, MaxRetry: 200 * time.Millisecond})
	made := time.Now()
	create(t, s, "ck", "1.00", "pi_1", 5*time.Second)
	c := quiet(t, s, 10*time.Second)
	all := r.every()
	if c.Expired != 1 || c.Deliveries != 0 || c.Attempts != len(all) || c.Retries != len(all)-1 {
		t.Fatalf("counters %+v after %d attempts", c, len(all))
	}
	if last := all[len(all)-1].at; last.After(made.Add(retryFor + time.Second)) {
		t.Errorf("an attempt %s after the event, past the bound %s", last.Sub(made), retryFor)
	}
	// At a constant 20 ms pause there would be about 75; capped doubling
	// to 200 ms gives about a dozen.
	if len(all) < 3 || len(all) > 30 {
		t.Errorf("%d attempts in %s", len(all), retryFor)
	}
}

// Each webhook fault by prefix, alone and after a call's prefix.
func TestWebhookFaultsByPrefix(t *testing.T) {
	t.Parallel()
	late := 700 * time.Millisecond
	tests := []struct {
		ref       string
		callFault bool // the call's answer is lost (drop_)
		want      int  // deliveries of the event
		fault     sandboxprovider.WebhookFault
		late      bool // it arrives after the next charge's event, made later
	}{
		{"pi_1", false, 1, "", false},
		{"drop_1", true, 1, "", false},
		{"hookdup_1", false, 2, sandboxprovider.WebhookDuplicate, false},
		{"drop_hookdup_1", true, 2, sandboxprovider.WebhookDuplicate, false},
		{"hooklost_1", false, 0, sandboxprovider.WebhookLost, false},
		{"drop_hooklost_1", true, 0, sandboxprovider.WebhookLost, false},
		{"decline_hooklate_1", false, 1, sandboxprovider.WebhookLate, true},
		{"hooklate_1", false, 1, sandboxprovider.WebhookLate, true},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, always(http.StatusOK))
			s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{LateDelay: late})
			a := create(t, s, "k1", "1.00", tc.ref, 5*time.Second)
			if lost := a.err != nil; lost != tc.callFault {
				t.Fatalf("the call's answer: %+v", a)
			}
			create(t, s, "k2", "1.00", "pi_next", 5*time.Second)
			c := quiet(t, s, 10*time.Second)
			var ours []arrival
			nextFirst := false
			for _, d := range r.delivered() {
				if strings.Contains(string(d.event.Data), `"idempotencyKey":"k1"`) {
					ours = append(ours, d)
				} else if len(ours) == 0 {
					nextFirst = true
				}
			}
			if len(ours) != tc.want {
				t.Fatalf("%d deliveries of the event, want %d", len(ours), tc.want)
			}
			if len(ours) == 2 && (ours[0].body != ours[1].body) {
				t.Errorf("a duplicate differs: %s vs %s", ours[0].body, ours[1].body)
			}
			// Without a fault the two events race to the receiver (four
			// workers); a late one always loses.
			if tc.late && !nextFirst {
				t.Errorf("the late event came before the next charge's")
			}
			if (tc.fault != "" && c.Faults[tc.fault] != 1) || len(c.Faults) > 1 {
				t.Errorf("faults %v, want one %q", c.Faults, tc.fault)
			}
			if c.Events != 2 || c.Deliveries != tc.want+1 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// A swapped charge event is held until its refund's event has been sent,
// (not for its bound), so the refund's arrives first; with no refund, it is
// sent after LateDelay all the same.
func TestSwappedEventsArriveInTheOtherOrder(t *testing.T) {
	t.Parallel()
	for _, refunded := range []bool{true, false} {
		t.Run(map[bool]string{true: "refunded", false: "alone"}[refunded], func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, always(http.StatusOK))
			// Refunded, the charge's event waits for the refund's, not for
			// its bound: a minute, longer than the test waits.
			bound := map[bool]time.Duration{true: time.Minute, false: 300 * time.Millisecond}[refunded]
			s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{LateDelay: bound})
			create(t, s, "ck", "10.00", "hookswap_1", 5*time.Second)
			if refunded {
				refund(t, s, "rk", "ck", "1.00", "re_1", 5*time.Second)
			}
			c := quiet(t, s, 15*time.Second)
			var types []string
			for _, d := range r.delivered() {
				types = append(types, d.event.Type)
			}
			want := []string{"charge.succeeded"}
			if refunded {
				want = []string{"refund.succeeded", "charge.succeeded"}
			}
			if !slices.Equal(types, want) || c.Faults[sandboxprovider.WebhookSwap] != 1 {
				t.Fatalf("arrived %v, want %v; counters %+v", types, want, c)
			}
		})
	}
}

// Random webhook faults are drawn from the seed: two runs with one seed
// give each event the same fault, however their deliveries' failures and
// retries interleave with the making of later events (the receiver fails
// every event's first attempt), and they do not change the calls' faults.
func TestSeededWebhookFaultsAreReproducible(t *testing.T) {
	t.Parallel()
	rates := map[sandboxprovider.WebhookFault]float64{
		sandboxprovider.WebhookDuplicate: 0.2, sandboxprovider.WebhookLost: 0.2, sandboxprovider.WebhookLate: 0.2,
	}
	firstFails := func(_, ofEvent int) int { return map[bool]int{true: 500, false: 200}[ofEvent == 1] }
	// run returns, by charge key, how many times its event was delivered.
	run := func() (sandboxprovider.WebhookCounters, map[string]int) {
		r := newReceiver(t, firstFails)
		s := startWithWebhooks(t, r, sandboxprovider.WebhookConfig{FaultRates: rates, LateDelay: 100 * time.Millisecond})
		for i := range 30 {
			key := "k" + string(rune('a'+i))
			create(t, s, key, "1", "pi_"+key, 2*time.Second)
			time.Sleep(time.Duration(i%3) * time.Millisecond) // vary the interleaving
		}
		c := quiet(t, s, 10*time.Second)
		delivered := map[string]int{}
		for _, d := range r.delivered() {
			var obj struct{ IdempotencyKey string }
			_ = json.Unmarshal(d.event.Data, &obj)
			delivered[obj.IdempotencyKey]++
		}
		return c, delivered
	}
	c1, d1 := run()
	c2, d2 := run()
	if !maps.Equal(c1.Faults, c2.Faults) || !maps.Equal(d1, d2) {
		t.Fatalf("two runs of one seed differ: %v %v vs %v %v", c1.Faults, d1, c2.Faults, d2)
	}
	dup, lost := c1.Faults[sandboxprovider.WebhookDuplicate], c1.Faults[sandboxprovider.WebhookLost]
	if dup == 0 || lost == 0 || c1.Faults[sandboxprovider.WebhookLate] == 0 || c1.Deliveries != 30+dup-lost || c1.Retries == 0 {
		t.Fatalf("counters %+v over 30 events", c1)
	}
}

// The queue is bounded: with a receiver that does not answer and one
// worker, events beyond the bound are dropped and counted, and the
// provider's calls are never held up by it.
func TestQueueIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	s := start(t, sandboxprovider.Config{Webhooks: sandboxprovider.WebhookConfig{
		URL: hang.URL, Secret: testSecret, Workers: 1, QueueSize: 2, Timeout: time.Minute}})
	for i := range 5 {
		key := "k" + string(rune('a'+i))
		if a := create(t, s, key, "1", "pi_"+key, 2*time.Second); a.status != http.StatusOK {
			t.Fatalf("charge %d: %+v", i, a)
		}
	}
	if c := s.WebhookCounters(); c.Events != 5 || c.Dropped != 3 || c.Pending != 2 {
		t.Fatalf("counters %+v, want 5 events, 3 dropped, 2 pending", c)
	}
}

// Stopping the provider stops its webhook goroutines, with deliveries
// pending and an attempt hanging on a receiver that does not answer. Not
// parallel: it counts the goroutines of every sender in the process.
func TestStopLeavesNoWebhookGoroutine(t *testing.T) {
	for _, stop := range []string{"Close", "Shutdown"} {
		t.Run(stop, func(t *testing.T) {
			release := make(chan struct{})
			hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
			defer hang.Close()
			defer close(release)
			s, err := sandboxprovider.Start("127.0.0.1:0", sandboxprovider.Config{Webhooks: sandboxprovider.WebhookConfig{
				URL: hang.URL, Secret: testSecret, Timeout: time.Minute, LateDelay: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			create(t, s, "k1", "1", "pi_1", 2*time.Second)
			create(t, s, "k2", "1", "hooklate_2", 2*time.Second)
			if n := senderGoroutines(); n == 0 {
				t.Fatal("no sender goroutine found while running: the check cannot fail")
			}
			if stop == "Close" {
				err = s.Close()
			} else {
				err = s.Shutdown(t.Context())
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := senderGoroutines(); n != 0 {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d webhook goroutines left after %s:\n%s", n, stop, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// senderGoroutines counts the goroutines running the webhook sender's code.
func senderGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "sandboxprovider.(*webhookSender)") {
			n++
		}
	}
	return n
}
