package stripefake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/example/payment-service/internal/stripefake"
)

const secretKey = "sk_test_fake"

// clock is a fake's clock that tests move.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fake is a fake under test, served through the check of its answers
// against Stripe's document.
type fake struct {
	*stripefake.Server
	base  string
	clock *clock
}

func start(t *testing.T, cfg stripefake.Config) *fake {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	if cfg.Now == nil {
		cfg.Now = c.Now
	}
	if cfg.SecretKey == "" {
		cfg.SecretKey = secretKey
	}
	s := stripefake.New(cfg)
	ts := httptest.NewServer(validated(t, s.Handler()))
	t.Cleanup(func() {
		ts.Close()
		_ = s.Close()
	})
	return &fake{Server: s, base: ts.URL, clock: c}
}

// reply is an answer as a test reads it.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// obj decodes the answer's JSON object.
func (r reply) obj(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v\n%s", r.status, err, r.body)
	}
	return m
}

// str is the string at a dotted path of the answer's object.
func (r reply) str(t *testing.T, path string) string {
	t.Helper()
	var v any = r.obj(t)
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatInt(int64(x), 10)
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// call sends one request with the fake's API key, under key if set.
func (f *fake) call(t *testing.T, method, path, key string, params url.Values) reply {
	t.Helper()
	return f.callAs(t, secretKey, method, path, key, params)
}

func (f *fake) callAs(t *testing.T, apiKey, method, path, key string, params url.Values) reply {
	t.Helper()
	var body io.Reader
	target := f.base + path
	if method == http.MethodGet {
		target += "?" + params.Encode()
	} else {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: 0, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// intent is the form of a confirmed PaymentIntent of amount eur cents
// paid with pm, under the reference ref.
func intent(amount int, pm, ref string) url.Values {
	return url.Values{"amount": {strconv.Itoa(amount)}, "currency": {"eur"}, "confirm": {"true"},
		"payment_method": {pm}, "metadata[provider_key]": {ref}}
}

func manual(v url.Values) url.Values {
	v.Set("capture_method", "manual")
	return v
}

// Stripe's idempotency layer, as its documentation states it, row by row:
// what a second request under a key gets, and how often the endpoint ran.
func TestIdempotencyAsStripeDocumentsIt(t *testing.T) {
	t.Parallel()
	visa := intent(1050, stripefake.PMVisa, "k")
	other := intent(999, stripefake.PMVisa, "k")
	tests := []struct {
		name      string
		faults    []stripefake.Fault
		first     func(f *fake, key string) reply
		wantFirst int
		then      func(f *fake, key string) reply
		wantThen  int
		replayed  bool
		executed  int // how often the endpoint ran under the key, both requests
	}{
		{name: "same parameters: the first answer again",
			first: post(visa), wantFirst: 200, then: post(visa), wantThen: 200, replayed: true, executed: 1},
		{name: "other parameters: idempotency_error, nothing executed",
			first: post(visa), wantFirst: 200, then: post(other), wantThen: 400, executed: 1},
		{name: "another endpoint under the key: idempotency_error",
			first: post(visa), wantFirst: 200, then: func(f *fake, key string) reply {
				return f.call(t, "POST", "/v1/refunds", key, url.Values{"payment_intent": {f.last(t)}})
			}, wantThen: 400, executed: 1},
		{name: "a 401 is not saved",
			first: func(f *fake, key string) reply {
				return f.callAs(t, "sk_test_wrong", "POST", "/v1/payment_intents", key, visa)
			}, wantFirst: 401,
			then: post(visa), wantThen: 200, executed: 1},
		{name: "a 429 is not saved", faults: []stripefake.Fault{stripefake.FaultRateLimit},
			first: post(visa), wantFirst: 429, then: post(visa), wantThen: 200, executed: 1},
		{name: "an injected validation refusal is not saved", faults: []stripefake.Fault{stripefake.FaultInvalid},
			first: post(visa), wantFirst: 400, then: post(visa), wantThen: 200, executed: 1},
		{name: "the lost answer's payment method: the first answer lost, its replay answers",
			first: post(intent(1050, stripefake.PMLostAnswer, "k")), wantFirst: 0,
			then: post(intent(1050, stripefake.PMLostAnswer, "k")), wantThen: 200, replayed: true, executed: 1},
		{name: "a validation failure is not saved",
			first: post(url.Values{"currency": {"eur"}, "metadata[provider_key]": {"k"}}), wantFirst: 400,
			then: post(visa), wantThen: 200, executed: 1},
		{name: "a 500 after executing is saved and replayed", faults: []stripefake.Fault{stripefake.Fault500},
			first: post(visa), wantFirst: 500, then: post(visa), wantThen: 500, replayed: true, executed: 1},
		{name: "a 500 before executing is saved and replayed", faults: []stripefake.Fault{stripefake.Fault500Nothing},
			first: post(visa), wantFirst: 500, then: post(visa), wantThen: 500, replayed: true, executed: 0},
		{name: "a decline is saved and replayed",
			first: post(intent(1050, stripefake.PMDeclined, "k")), wantFirst: 402,
			then: post(intent(1050, stripefake.PMDeclined, "k")), wantThen: 402, replayed: true, executed: 1},
		{name: "a state refusal is saved and replayed",
			first: func(f *fake, key string) reply {
				f.call(t, "POST", "/v1/payment_intents", "setup-"+key, visa)
				return f.call(t, "POST", "/v1/payment_intents/"+f.last(t)+"/capture", key, nil)
			}, wantFirst: 400,
			then: func(f *fake, key string) reply {
				return f.call(t, "POST", "/v1/payment_intents/"+f.last(t)+"/capture", key, nil)
			}, wantThen: 400, replayed: true, executed: 1},
		{name: "a key longer than 255 characters is refused",
			first: func(f *fake, _ string) reply {
				return f.call(t, "POST", "/v1/payment_intents", strings.Repeat("k", 256), visa)
			}, wantFirst: 400, then: post(visa), wantThen: 200, executed: 1},
		{name: "after 24 hours the key is new again",
			first: post(visa), wantFirst: 200,
			then: func(f *fake, key string) reply {
				f.clock.Advance(24*time.Hour + time.Second)
				return post(other)(f, key)
			}, wantThen: 200, executed: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := start(t, stripefake.Config{})
			const key = "idem-1"
			f.FailNext(key, tc.faults...)
			if got := tc.first(f, key); got.status != tc.wantFirst {
				t.Fatalf("first answered %d, want %d: %s", got.status, tc.wantFirst, got.body)
			}
			got := tc.then(f, key)
			if got.status != tc.wantThen {
				t.Fatalf("then answered %d, want %d: %s", got.status, tc.wantThen, got.body)
			}
			if replayed := got.header.Get("Idempotent-Replayed") == "true"; replayed != tc.replayed {
				t.Fatalf("replayed = %v, want %v", replayed, tc.replayed)
			}
			if n := f.Executed(key); n != tc.executed {
				t.Fatalf("executed %d times under the key, want %d", n, tc.executed)
			}
		})
	}
}

// post is a POST /v1/payment_intents of params.
func post(params url.Values) func(f *fake, key string) reply {
	return func(f *fake, key string) reply {
		return f.callNoT("POST", "/v1/payment_intents", key, params)
	}
}

// callNoT is call for the table's functions, which hold no t.
func (f *fake) callNoT(method, path, key string, params url.Values) reply {
	req, _ := http.NewRequest(method, f.base+path, strings.NewReader(params.Encode()))
	req.Header.Set("Authorization", "Bearer "+secretKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// last is the id of the PaymentIntent made last.
func (f *fake) last(t *testing.T) string {
	t.Helper()
	r := f.call(t, "GET", "/v1/payment_intents", "", url.Values{"limit": {"1"}})
	var l struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.Unmarshal(r.body, &l); err != nil || len(l.Data) == 0 {
		t.Fatalf("no payment intent: %v %s", err, r.body)
	}
	return l.Data[0].ID
}

// A request under a key whose first request is still executing (kept in
// flight by FaultBusy, or by the fake's latency) gets 409
// idempotency_key_in_use, and the endpoint runs once.
func TestAKeyInUseIsAConflict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cfg    stripefake.Config
		faults []stripefake.Fault
	}{
		{"busy", stripefake.Config{SlowDelay: 500 * time.Millisecond}, []stripefake.Fault{stripefake.FaultBusy}},
		{"latency", stripefake.Config{Latency: 500 * time.Millisecond}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := start(t, tc.cfg)
			f.FailNext("busy", tc.faults...)
			first := make(chan reply)
			go func() { first <- post(intent(1050, stripefake.PMVisa, "busy"))(f, "busy") }()
			f.waitInFlight(t, "busy")
			second := f.call(t, "POST", "/v1/payment_intents", "busy", intent(1050, stripefake.PMVisa, "busy"))
			if second.status != 409 || second.str(t, "error.code") != "idempotency_key_in_use" {
				t.Fatalf("a second request in flight got %d: %s", second.status, second.body)
			}
			if got := <-first; got.status != 200 {
				t.Fatalf("the first got %d: %s", got.status, got.body)
			}
			if n := f.Executed("busy"); n != 1 {
				t.Fatalf("executed %d times", n)
			}
		})
	}
}

// waitInFlight waits until a request under key is executing.
func (f *fake) waitInFlight(t *testing.T, key string) {
	t.Helper()
	for polls := 0; !f.InFlight(key); polls++ {
		if polls == 1000 {
			t.Fatalf("no request under %q is in flight after 1,000 polls", key)
		}
		time.Sleep(time.Millisecond)
	}
}

// A held request executes only when the test releases it, however long
// after its sender gave up: meanwhile another request under its key meets
// 409, and the List, strongly consistent, finds nothing, since nothing is
// made yet. The ledger then holds the PaymentIntent, once, under its key.
func TestAHeldRequestExecutesWhenReleased(t *testing.T) {
	t.Parallel()
	f := start(t, stripefake.Config{})
	f.FailNext("held", stripefake.FaultHold)
	first := make(chan reply)
	go func() { first <- post(intent(1050, stripefake.PMVisa, "held"))(f, "held") }()
	f.waitInFlight(t, "held")
	if r := f.call(t, "POST", "/v1/payment_intents", "held", intent(1050, stripefake.PMVisa, "held")); r.status != 409 {
		t.Fatalf("a second request while the first is held got %d: %s", r.status, r.body)
	}
	if r := f.call(t, "GET", "/v1/payment_intents", "", url.Values{"limit": {"100"}}); len(r.obj(t)["data"].([]any)) != 0 {
		t.Fatalf("the List shows a PaymentIntent before the held request executed: %s", r.body)
	}
	if l := f.Ledger(); len(l.PaymentIntents) != 0 || l.Executed["held"] != 0 {
		t.Fatalf("the ledger before the release: %+v", l)
	}
	f.Release("held")
	if got := <-first; got.status != 200 {
		t.Fatalf("the released request got %d: %s", got.status, got.body)
	}
	l := f.Ledger()
	if len(l.PaymentIntents) != 1 || l.Executed["held"] != 1 {
		t.Fatalf("the ledger after the release: %+v", l)
	}
	if p := l.PaymentIntents[0]; p.Status != "succeeded" || p.AmountReceived != 1050 || p.Metadata["provider_key"] != "held" || !p.Charged || p.PaymentError != "" {
		t.Fatalf("the ledger's PaymentIntent: %+v", p)
	}
}

// What a confirmed PaymentIntent does, by its payment method and capture
// method.
func TestPaymentIntentsByPaymentMethod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		params     url.Values
		wantStatus int
		wantPI     string // the PaymentIntent's status, in the answer or its error
		wantEvent  string
	}{
		{"approved", intent(1050, stripefake.PMVisa, "a"), 200, "succeeded", "payment_intent.succeeded"},
		{"approved, held", manual(intent(1050, stripefake.PMVisa, "b")), 200, "requires_capture", "payment_intent.amount_capturable_updated"},
		{"declined", intent(1050, stripefake.PMDeclined, "c"), 402, "requires_payment_method", "payment_intent.payment_failed"},
		{"3-D Secure", intent(1050, stripefake.PMThreeDSecure, "d"), 200, "requires_action", "payment_intent.requires_action"},
		{"processing", intent(1050, stripefake.PMProcessing, "e"), 200, "processing", "payment_intent.processing"},
		{"zero-decimal", url.Values{"amount": {"500"}, "currency": {"jpy"}, "confirm": {"true"}, "payment_method": {stripefake.PMVisa}}, 200, "succeeded", "payment_intent.succeeded"},
		{"unknown payment method", intent(1050, "pm_nothing", "f"), 404, "", ""},
		{"no payment method to confirm with", url.Values{"amount": {"1050"}, "currency": {"eur"}, "confirm": {"true"}}, 400, "", ""},
		{"an unknown parameter", func() url.Values { v := intent(1050, stripefake.PMVisa, "g"); v.Set("tip", "1"); return v }(), 400, "", ""},
		{"an unknown currency", url.Values{"amount": {"1"}, "currency": {"xxx"}, "confirm": {"true"}, "payment_method": {stripefake.PMVisa}}, 400, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := start(t, stripefake.Config{})
			got := f.call(t, "POST", "/v1/payment_intents", "k-"+tc.name, tc.params)
			if got.status != tc.wantStatus {
				t.Fatalf("answered %d, want %d: %s", got.status, tc.wantStatus, got.body)
			}
			status := got.str(t, "status")
			if got.status == 402 {
				status = got.str(t, "error.payment_intent.status")
				if got.str(t, "error.type") != "card_error" || got.str(t, "error.code") != "card_declined" {
					t.Fatalf("a decline is not a card_error card_declined: %s", got.body)
				}
			}
			if status != tc.wantPI {
				t.Fatalf("status %q, want %q", status, tc.wantPI)
			}
			events := f.Events()
			if tc.wantEvent == "" {
				if len(events) != 0 {
					t.Fatalf("events %v for a refused request", events)
				}
				return
			}
			if len(events) != 1 || events[0].Type != tc.wantEvent {
				t.Fatalf("events %+v, want one %s", events, tc.wantEvent)
			}
			checkEvent(t, events[0])
		})
	}
}

// A processing PaymentIntent is settled later, and says so in an event.
func TestAProcessingPaymentIntentSettlesLater(t *testing.T) {
	t.Parallel()
	for _, approve := range []bool{true, false} {
		f := start(t, stripefake.Config{})
		id := f.call(t, "POST", "/v1/payment_intents", "p", intent(1050, stripefake.PMProcessing, "p")).str(t, "id")
		if err := f.SettlePaymentIntent(id, approve); err != nil {
			t.Fatal(err)
		}
		got := f.call(t, "GET", "/v1/payment_intents/"+id, "", nil)
		want, wantEvent := "succeeded", "payment_intent.succeeded"
		if !approve {
			want, wantEvent = "requires_payment_method", "payment_intent.payment_failed"
		}
		events := f.Events()
		if got.str(t, "status") != want || events[len(events)-1].Type != wantEvent {
			t.Fatalf("settled %v: %s, last event %s", approve, got.body, events[len(events)-1].Type)
		}
		if err := f.SettlePaymentIntent(id, approve); err == nil {
			t.Fatal("settled twice")
		}
	}
}

// A capture takes at most what is held, once, and releases the rest; a
// cancel releases a hold; a lapse cancels it with the reason automatic.
func TestCaptureCancelAndLapse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		act        func(f *fake, id string) reply
		wantStatus int
		want       map[string]string // fields of the PaymentIntent afterwards
	}{
		{"capture in full", func(f *fake, id string) reply {
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c1", url.Values{"metadata[capture_key]": {"c1"}})
		}, 200, map[string]string{"status": "succeeded", "amount_received": "1050", "amount_capturable": "0", "metadata.capture_key": "c1"}},
		{"capture in part releases the rest", func(f *fake, id string) reply {
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c2", url.Values{"amount_to_capture": {"400"}})
		}, 200, map[string]string{"status": "succeeded", "amount_received": "400", "amount_capturable": "0"}},
		{"capture above the hold", func(f *fake, id string) reply {
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c3", url.Values{"amount_to_capture": {"1051"}})
		}, 400, map[string]string{"status": "requires_capture", "amount_capturable": "1050"}},
		{"capture twice", func(f *fake, id string) reply {
			f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c4", nil)
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c5", nil)
		}, 400, map[string]string{"status": "succeeded", "amount_received": "1050"}},
		{"cancel", func(f *fake, id string) reply {
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/cancel", "v1", nil)
		}, 200, map[string]string{"status": "canceled", "amount_capturable": "0", "cancellation_reason": ""}},
		{"cancel a captured one", func(f *fake, id string) reply {
			f.callNoT("POST", "/v1/payment_intents/"+id+"/capture", "c6", nil)
			return f.callNoT("POST", "/v1/payment_intents/"+id+"/cancel", "v2", nil)
		}, 400, map[string]string{"status": "succeeded"}},
		{"a lapse", func(f *fake, id string) reply {
			if err := f.ExpireHold(id); err != nil {
				return reply{body: []byte(err.Error())}
			}
			return f.callNoT("GET", "/v1/payment_intents/"+id, "", nil)
		}, 200, map[string]string{"status": "canceled", "cancellation_reason": "automatic"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := start(t, stripefake.Config{})
			id := f.call(t, "POST", "/v1/payment_intents", "auth", manual(intent(1050, stripefake.PMVisa, "h"))).str(t, "id")
			if got := tc.act(f, id); got.status != tc.wantStatus {
				t.Fatalf("answered %d, want %d: %s", got.status, tc.wantStatus, got.body)
			}
			now := f.call(t, "GET", "/v1/payment_intents/"+id, "", nil)
			for field, want := range tc.want {
				if got := now.str(t, field); got != want {
					t.Fatalf("%s = %q, want %q: %s", field, got, want, now.body)
				}
			}
			for _, ev := range f.Events() {
				checkEvent(t, ev)
			}
		})
	}
}

// Refunds take at most what the PaymentIntent received less what its
// refunds took; a pending one that fails gives its amount back.
func TestRefunds(t *testing.T) {
	t.Parallel()
	f := start(t, stripefake.Config{})
	pi := f.call(t, "POST", "/v1/payment_intents", "pay", intent(1050, stripefake.PMVisa, "r")).str(t, "id")
	held := f.call(t, "POST", "/v1/payment_intents", "hold", manual(intent(1050, stripefake.PMVisa, "r2"))).str(t, "id")
	refund := func(key string, amount int, pi string) reply {
		return f.call(t, "POST", "/v1/refunds", key, url.Values{"payment_intent": {pi}, "amount": {strconv.Itoa(amount)}, "metadata[provider_key]": {key}})
	}
	f.FailNext("re-pending", stripefake.FaultRefundPending)
	steps := []struct {
		name       string
		got        reply
		wantStatus int
		wantRefund string
	}{
		{"part", refund("re-1", 1000, pi), 200, "succeeded"},
		{"beyond what is left", refund("re-2", 51, pi), 400, ""},
		{"pending", refund("re-pending", 50, pi), 200, "pending"},
		{"nothing left while it is pending", refund("re-3", 1, pi), 400, ""},
		{"a held PaymentIntent", refund("re-4", 1, held), 400, ""},
		{"an unknown PaymentIntent", refund("re-5", 1, "pi_nothing"), 404, ""},
	}
	for _, s := range steps {
		if s.got.status != s.wantStatus || s.got.str(t, "status") != s.wantRefund {
			t.Fatalf("%s: answered %d %q, want %d %q: %s", s.name, s.got.status, s.got.str(t, "status"), s.wantStatus, s.wantRefund, s.got.body)
		}
	}
	id, _, _, _ := f.RefundByMetadata("provider_key", "re-pending")
	if err := f.SettleRefund(id, false); err != nil {
		t.Fatal(err)
	}
	if got := refund("re-6", 50, pi); got.status != 200 {
		t.Fatalf("the failed refund's amount is not free again: %d %s", got.status, got.body)
	}
	list := f.call(t, "GET", "/v1/refunds", "", url.Values{"payment_intent": {pi}, "limit": {"2"}})
	if list.status != 200 || list.str(t, "has_more") != "true" {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
	if got := f.call(t, "GET", "/v1/refunds/"+id, "", nil); got.str(t, "status") != "failed" {
		t.Fatalf("the refund settled failed reads %s", got.body)
	}
	// The ledger: the three refunds made, in order, and what they took of
	// the PaymentIntent (the failed one's amount given back).
	l := f.Ledger()
	var made []string
	for _, r := range l.Refunds {
		made = append(made, r.Metadata["provider_key"]+" "+r.Status+" "+strconv.FormatInt(r.Amount, 10))
	}
	if got := strings.Join(made, ", "); got != "re-1 succeeded 1000, re-pending failed 50, re-6 succeeded 50" {
		t.Fatalf("the ledger's refunds: %s", got)
	}
	if p := l.PaymentIntents[0]; p.ID != pi || p.AmountRefunded != 1050 {
		t.Fatalf("the ledger's PaymentIntent after its refunds: %+v", p)
	}
	for _, ev := range f.Events() {
		checkEvent(t, ev)
	}
}

// List is strongly consistent, filtered by created and paged newest
// first; search sees an object only after its lag, so a miss there
// proves nothing.
func TestListAndSearch(t *testing.T) {
	t.Parallel()
	f := start(t, stripefake.Config{SearchLag: 30 * time.Second})
	t0 := f.clock.Now()
	var ids []string
	for i := range 5 {
		ids = append(ids, f.call(t, "POST", "/v1/payment_intents", "l"+strconv.Itoa(i), intent(100+i, stripefake.PMVisa, "ref"+strconv.Itoa(i))).str(t, "id"))
		f.clock.Advance(10 * time.Second)
	}
	type page struct {
		Data    []struct{ ID string } `json:"data"`
		HasMore bool                  `json:"has_more"`
	}
	listed := func(params url.Values) (got []string, more bool) {
		r := f.call(t, "GET", "/v1/payment_intents", "", params)
		var p page
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%d %s", r.status, r.body)
		}
		for _, d := range p.Data {
			got = append(got, d.ID)
		}
		return got, p.HasMore
	}
	since := strconv.FormatInt(t0.Add(20*time.Second).Unix(), 10)
	first, more := listed(url.Values{"created[gte]": {since}, "limit": {"2"}})
	if strings.Join(first, ",") != ids[4]+","+ids[3] || !more {
		t.Fatalf("first page %v (more %v), want the two newest of %v", first, more, ids)
	}
	second, more := listed(url.Values{"created[gte]": {since}, "limit": {"2"}, "starting_after": {first[1]}})
	if strings.Join(second, ",") != ids[2] || more {
		t.Fatalf("second page %v (more %v), want %s alone", second, more, ids[2])
	}
	search := func(ref string) int {
		r := f.call(t, "GET", "/v1/payment_intents/search", "", url.Values{"query": {"metadata['provider_key']:'" + ref + "'"}})
		if r.status != 200 {
			t.Fatalf("search: %d %s", r.status, r.body)
		}
		var p page
		_ = json.Unmarshal(r.body, &p)
		return len(p.Data)
	}
	if n := search("ref4"); n != 0 {
		t.Fatalf("search found the newest PaymentIntent %d times before its index caught up", n)
	}
	if n := search("ref0"); n != 1 {
		t.Fatalf("search found the oldest PaymentIntent %d times after its lag", n)
	}
	f.clock.Advance(time.Minute)
	if n := search("ref4"); n != 1 {
		t.Fatalf("search found the newest PaymentIntent %d times after its lag", n)
	}
	f.FailNext(stripefake.LookupFaults, stripefake.FaultLookup500)
	if r := f.call(t, "GET", "/v1/payment_intents", "", nil); r.status != 500 {
		t.Fatalf("a lookup fault answered %d", r.status)
	}
}

// Events are signed as Stripe signs them (stripe-go's webhook package
// verifies them), delivered to the URL set, and delivered again until a
// 2xx.
func TestEventsAreSignedAndDeliveredAtLeastOnce(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_fake" //nolint:gosec // G101: the test's own secret
	var (
		mu       sync.Mutex
		received []string
		failOnce = true
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), secret)
		if err != nil {
			t.Errorf("a delivery does not verify: %v", err)
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if failOnce {
			failOnce = false
			w.WriteHeader(500)
			return
		}
		received = append(received, string(ev.Type))
	}))
	t.Cleanup(hook.Close)
	f := start(t, stripefake.Config{WebhookSecret: secret, WebhookRetryFor: 10 * time.Second})
	f.call(t, "POST", "/v1/payment_intents", "w", intent(1050, stripefake.PMVisa, "w"))
	f.SetWebhookURL(hook.URL)
	for polls := 0; f.Delivered() < 1; polls++ {
		if polls == 500 {
			t.Fatalf("not delivered within 500 polls; %d pending", f.Undelivered())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(received) != 1 || received[0] != string(stripe.EventTypePaymentIntentSucceeded) {
		t.Fatalf("received %v", received)
	}
	var e struct {
		APIVersion string `json:"api_version"`
	}
	_ = json.Unmarshal(f.Events()[0].Body, &e)
	if e.APIVersion != stripe.APIVersion {
		t.Fatalf("events carry api_version %q, stripe-go pins %q", e.APIVersion, stripe.APIVersion)
	}
}
