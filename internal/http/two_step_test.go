package http_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// Two-step payments over HTTP against the real service, PostgreSQL and the
// sandbox provider: authorize, then capture or void; the provider's ledger
// is the judge of what was held, taken and given back.

func authorizeBody(order int64, amount, external string) string {
	return fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":%q,"currency":"RUB","paymentProvider":"sandbox","externalPaymentId":%q,"captureMethod":"manual"}`,
		order, amount, external)
}

func captureBody(amount, currency, ref string) string {
	return fmt.Sprintf(`{"amount":%q,"currency":%q,"externalCaptureId":%q}`, amount, currency, ref)
}

// authorize authorizes a new order's payment and returns its id.
func (s *testService) authorize(t *testing.T, order int64, amount, external string) int64 {
	t.Helper()
	s.addOrder(t, order, 42, amount, "RUB")
	r := s.charge(t, "auth-"+external, authorizeBody(order, amount, external))
	p := paymentOf(t, r)
	if r.status != http.StatusCreated || p.Status != "AUTHORIZED" || p.CaptureMethod != "manual" {
		t.Fatalf("authorize: %d %s", r.status, r.body)
	}
	return p.ID
}

// codeOf is a problem's code, or the body itself when it is not JSON:
// safe to call from any goroutine.
func codeOf(r response) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(r.body, &p) != nil {
		return "unreadable: " + string(r.body)
	}
	return p.Code
}

type paymentBody struct {
	ID             int64  `json:"id"`
	Status         string `json:"status"`
	CaptureMethod  string `json:"captureMethod"`
	CapturedAmount string `json:"capturedAmount"`
	Code           string `json:"code"`
}

func paymentOf(t *testing.T, r response) paymentBody {
	t.Helper()
	var p paymentBody
	if r.status >= 400 {
		p.Code = codeOf(r)
		return p
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return p
}

func (s *testService) capture(t *testing.T, id int64, key, body string) response {
	t.Helper()
	return s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/captures", id), body, map[string]string{"Idempotency-Key": key})
}

func (s *testService) void(t *testing.T, id int64, key string) response {
	t.Helper()
	return s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/voids", id), "{}", map[string]string{"Idempotency-Key": key})
}

func TestAuthorizeThenCaptureThenRefund(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9101, "100.00", "pi_two_step")

	// A partial capture takes 60.00 and releases the rest.
	r := s.capture(t, id, "cap-1", captureBody("60.00", "RUB", "cap_1"))
	p := paymentOf(t, r)
	if r.status != http.StatusCreated || p.Status != "SUCCEEDED" || p.CapturedAmount != "60.00" {
		t.Fatalf("capture: %d %s", r.status, r.body)
	}
	if again := s.capture(t, id, "cap-1", captureBody("60.00", "RUB", "cap_1")); string(again.body) != string(r.body) ||
		again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed capture: %d %s", again.status, again.body)
	}
	// Refunds are of captured money only.
	if r := s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/refunds", id), `{"amount":"60.01","externalRefundId":"re_over"}`,
		map[string]string{"Idempotency-Key": "ref-over"}); r.status != http.StatusConflict {
		t.Fatalf("refund above the capture: %d %s", r.status, r.body)
	}
	if r := s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/refunds", id), `{"amount":"60.00","externalRefundId":"re_all"}`,
		map[string]string{"Idempotency-Key": "ref-all"}); r.status != http.StatusCreated {
		t.Fatalf("refund of the capture: %d %s", r.status, r.body)
	}
	net := s.provider.NetCaptured("pi_two_step")
	if len(net.Violations) > 0 || net.Authorizations != 1 || net.Captures != 1 ||
		!net.Captured.Equal(decimal.RequireFromString("60")) || !net.Net.IsZero() {
		t.Fatalf("the provider's ledger: %+v", net)
	}
	for _, typ := range []string{"PaymentAuthorized.v1", "PaymentCaptured.v1", "PaymentRefunded.v1"} {
		if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = $1`, typ); n != 1 {
			t.Errorf("%d %s events, want 1", n, typ)
		}
	}
}

func TestAuthorizeThenVoidFreesTheOrder(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9201, "50.00", "pi_void")
	// While it is authorized, the order is taken: one paid order is paid once.
	if r := s.charge(t, "second", chargeBody(9201, 42, "50.00", "RUB", "pi_second")); r.status != http.StatusConflict {
		t.Fatalf("a second payment for an authorized order: %d %s", r.status, r.body)
	}
	r := s.void(t, id, "void-1")
	if p := paymentOf(t, r); r.status != http.StatusCreated || p.Status != "VOIDED" {
		t.Fatalf("void: %d %s", r.status, r.body)
	}
	if r := s.charge(t, "third", chargeBody(9201, 42, "50.00", "RUB", "pi_third")); r.status != http.StatusCreated {
		t.Fatalf("a new payment for the voided order: %d %s", r.status, r.body)
	}
	if r := s.capture(t, id, "cap-after-void", captureBody("50.00", "RUB", "cap_late")); r.status != http.StatusConflict || paymentOf(t, r).Code != "payment-not-authorized" {
		t.Fatalf("a capture of a voided payment: %d %s", r.status, r.body)
	}
	if net := s.provider.NetCaptured("pi_void"); net.Voids != 1 || net.Captures != 0 || len(net.Violations) > 0 {
		t.Fatalf("the provider's ledger: %+v", net)
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'cap-after-void'`); n != 0 {
		t.Fatalf("a refused capture stored %d records", n)
	}
}

// Captures and voids of one payment at once, each under its own key:
// exactly one wins at the provider and in the database, and every other
// gets a 409 with nothing stored for its key; 20 identical captures (one
// key) make one.
func TestCaptureRacingVoidHasOneWinner(t *testing.T) {
	t.Parallel()
	logs := &servicetest.LogBuffer{}
	s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 50 * time.Millisecond}, func(o *startOptions) { o.logs = logs })
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	for round := range 3 {
		order := int64(9300 + round)
		external := fmt.Sprintf("pi_race_%d", round)
		id := s.authorize(t, order, "30.00", external)
		type attempt struct {
			key    string
			status int
			code   string
		}
		var mu sync.Mutex
		var attempts []attempt
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				key := fmt.Sprintf("r%d-cap-%d", round, i)
				r := s.capture(t, id, key, captureBody("30.00", "RUB", fmt.Sprintf("cap_%d_%d", round, i)))
				code := codeOf(r)
				mu.Lock()
				attempts = append(attempts, attempt{key, r.status, code})
				mu.Unlock()
			})
			wg.Go(func() {
				key := fmt.Sprintf("r%d-void-%d", round, i)
				r := s.void(t, id, key)
				code := codeOf(r)
				mu.Lock()
				attempts = append(attempts, attempt{key, r.status, code})
				mu.Unlock()
			})
		}
		for range 20 {
			wg.Go(func() {
				key := fmt.Sprintf("r%d-same", round)
				r := s.capture(t, id, key, captureBody("30.00", "RUB", fmt.Sprintf("cap_same_%d", round)))
				code := codeOf(r)
				mu.Lock()
				attempts = append(attempts, attempt{key, r.status, code})
				mu.Unlock()
			})
		}
		wg.Wait()
		won := map[string]bool{}
		for _, a := range attempts {
			switch {
			case a.status == http.StatusCreated:
				won[a.key] = true
			case a.status == http.StatusConflict && a.code == "request-in-progress":
			case a.status == http.StatusConflict && (a.code == "payment-not-authorized" || a.code == "payment-transition-in-progress"):
				// A refusal stores nothing, and a key that holds a record
				// (the same key's capture, made) is never refused.
				if s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, a.key) != 0 {
					t.Errorf("round %d: %s was refused, and its key holds a record", round, a.key)
				}
			default:
				t.Errorf("round %d: %s answered %d %s", round, a.key, a.status, a.code)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d winners (%v), want exactly one", round, len(won), won)
		}
		net := s.provider.NetCaptured(external)
		if len(net.Violations) > 0 || net.Captures+net.Voids != 1 {
			t.Fatalf("round %d: the provider's ledger: %+v", round, net)
		}
		if n := s.count(t, `SELECT count(*) FROM payment_transition WHERE payment_id = $1 AND status = 'SUCCEEDED'`, id); n != 1 {
			t.Fatalf("round %d: %d succeeded transitions, want 1", round, n)
		}
	}
}

// Every bad capture or void is refused with nothing stored.
func TestBadCapturesAndVoidsStoreNothing(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9401, "40.00", "pi_bad")
	s.addOrder(t, 9402, 42, "40.00", "RUB")
	oneStep := paymentOf(t, s.charge(t, "one-step", chargeBody(9402, 42, "40.00", "RUB", "pi_one_step"))).ID
	tests := []struct {
		name   string
		send   func(key string) response
		status int
		code   string
	}{
		{"another client's payment", func(key string) response {
			return s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/captures", id), captureBody("10.00", "RUB", "c1"),
				map[string]string{"Idempotency-Key": key, "Authorization": "Bearer " + otherKey})
		}, 404, "payment-not-found"},
		{"a void of another client's payment", func(key string) response {
			return s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/voids", id), "{}",
				map[string]string{"Idempotency-Key": key, "Authorization": "Bearer " + otherKey})
		}, 404, "payment-not-found"},
		{"a one-step charge", func(key string) response { return s.capture(t, oneStep, key, captureBody("10.00", "RUB", "c2")) }, 409, "payment-not-authorized"},
		{"a void of a one-step charge", func(key string) response { return s.void(t, oneStep, key) }, 409, "payment-not-authorized"},
		{"zero", func(key string) response { return s.capture(t, id, key, captureBody("0", "RUB", "c3")) }, 400, "validation-failed"},
		{"negative", func(key string) response { return s.capture(t, id, key, captureBody("-1.00", "RUB", "c4")) }, 400, "validation-failed"},
		{"above the authorization", func(key string) response { return s.capture(t, id, key, captureBody("40.01", "RUB", "c5")) }, 409, "capture-mismatch"},
		{"another currency", func(key string) response { return s.capture(t, id, key, captureBody("10.00", "EUR", "c6")) }, 409, "capture-mismatch"},
		{"no externalCaptureId", func(key string) response {
			return s.capture(t, id, key, `{"amount":"10.00","currency":"RUB"}`)
		}, 400, "validation-failed"},
		{"a body on a void", func(key string) response {
			return s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/voids", id), `{"amount":"1.00"}`, map[string]string{"Idempotency-Key": key})
		}, 400, "validation-failed"},
		{"no such payment", func(key string) response { return s.void(t, 999999, key) }, 404, "payment-not-found"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("bad-%d", i)
			r := tc.send(key)
			if r.status != tc.status || paymentOf(t, r).Code != tc.code {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if n := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, key); n != 0 {
				t.Fatalf("%d records stored", n)
			}
		})
	}
	if n := s.count(t, `SELECT count(*) FROM payment_transition`); n != 0 {
		t.Fatalf("%d transitions stored", n)
	}
	if r := s.void(t, id, "good-void"); r.status != http.StatusCreated {
		t.Fatalf("the payment is still voidable after the bad requests: %d %s", r.status, r.body)
	}
}

// A hold the provider lets lapse: a capture after it is refused for good,
// and the completer's run records EXPIRED once the provider says so,
// freeing the order.
func TestALapsedHoldExpires(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), map[string]string{
		"CHARGE_COMPLETER_CRON": "* * * * * *", "AUTHORIZATION_CHECK_AFTER": "0s",
	}, sandboxprovider.Config{AuthorizationTTL: 1500 * time.Millisecond})
	id := s.authorize(t, 9501, "25.00", "pi_lapse")
	deadline := time.Now().Add(20 * time.Second)
	for s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND status = 'EXPIRED'`, id) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the lapsed hold is not EXPIRED after 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentExpired.v1'`); n != 1 {
		t.Fatalf("%d PaymentExpired.v1 events, want 1", n)
	}
	if r := s.capture(t, id, "late", captureBody("25.00", "RUB", "cap_late")); r.status != http.StatusConflict || paymentOf(t, r).Code != "payment-not-authorized" {
		t.Fatalf("a capture of an expired payment: %d %s", r.status, r.body)
	}
	if r := s.charge(t, "again", chargeBody(9501, 42, "25.00", "RUB", "pi_lapse_again")); r.status != http.StatusCreated {
		t.Fatalf("a new payment for the expired order: %d %s", r.status, r.body)
	}
}

// A capture whose first answer is lost is never guessed: it stays PENDING
// and holds the payment (a void meanwhile is refused, nothing stored),
// and the retry with the same key settles it from the provider's record.
func TestALostCaptureAnswerHoldsThePaymentUntilSettled(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9601, "70.00", "pi_lost_capture")
	r := s.capture(t, id, "lost", captureBody("70.00", "RUB", "drop_cap"))
	if r.status != http.StatusServiceUnavailable || paymentOf(t, r).Code != "outcome-unknown" {
		t.Fatalf("a capture whose answer was lost: %d %s", r.status, r.body)
	}
	if v := s.void(t, id, "void-meanwhile"); v.status != http.StatusConflict || paymentOf(t, v).Code != "payment-transition-in-progress" {
		t.Fatalf("a void while the capture is unknown: %d %s", v.status, v.body)
	}
	retry := s.capture(t, id, "lost", captureBody("70.00", "RUB", "drop_cap"))
	if p := paymentOf(t, retry); retry.status != http.StatusCreated || p.Status != "SUCCEEDED" || p.CapturedAmount != "70.00" {
		t.Fatalf("the retry: %d %s", retry.status, retry.body)
	}
	if net := s.provider.NetCaptured("pi_lost_capture"); net.Captures != 1 || len(net.Violations) > 0 {
		t.Fatalf("the provider's ledger: %+v", net)
	}
}

// A capture whose answer was lost is settled by the provider's event,
// delivered twice, with no retry: the payment is SUCCEEDED with what was
// captured, the key replays the stored 201, and a void is refused. A hold's
// lapse is noted and changes nothing: the expiry job records a lapse from
// the provider's lookup alone.
func TestWebhookSettlesALostCaptureAnswer(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{})
	id := s.authorize(t, 9701, "90.00", "pi_wh_capture")
	body := captureBody("60.00", "RUB", "drop_whcap")
	if r := s.capture(t, id, "wh-cap", body); r.status != http.StatusServiceUnavailable || paymentOf(t, r).Code != "outcome-unknown" {
		t.Fatalf("a capture whose answer was lost: %d %s", r.status, r.body)
	}
	event := providerEvent(t, "evt_whcap", "capture.succeeded", s.providerAnswer(t, "drop_whcap"))
	results := []string{webhookResult(t, s.deliverSigned(t, event, webhookSecret)), webhookResult(t, s.deliverSigned(t, event, webhookSecret))}
	if results[0] != "applied" || results[1] != "duplicate" {
		t.Fatalf("two deliveries: %v, want applied then duplicate", results)
	}
	replay := s.capture(t, id, "wh-cap", body)
	if p := paymentOf(t, replay); replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" ||
		p.Status != "SUCCEEDED" || p.CapturedAmount != "60.00" {
		t.Fatalf("the replay: %d %s, want the stored 201 SUCCEEDED with 60.00 captured", replay.status, replay.body)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentCaptured.v1'`); n != 1 {
		t.Fatalf("capture events: %d, want 1", n)
	}
	if v := s.void(t, id, "void-after"); v.status != http.StatusConflict || paymentOf(t, v).Code != "payment-not-authorized" {
		t.Fatalf("a void of the captured payment: %d %s", v.status, v.body)
	}
	lapse := providerEvent(t, "evt_whlapse", "authorization.expired", s.providerAnswer(t, "pi_wh_capture"))
	if r := webhookResult(t, s.deliverSigned(t, lapse, webhookSecret)); r != "noted" {
		t.Fatalf("a lapse's delivery: %q, want noted", r)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("SUCCEEDED payments after the lapse's event: %d, want 1", n)
	}
}

// A void's body may be left out (api/openapi.yaml: requestBody not
// required), and then there is no Content-Type to declare it: such a void
// voids, and the same key with an empty object is its replay, the same
// command. A body the request does not declare as JSON is still 415.
func TestAVoidWithoutABodyIsAVoid(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9801, "30.00", "pi_void_no_body")
	path := fmt.Sprintf("/payments/%d/voids", id)
	if r := s.request(t, http.MethodPost, path, "{}", map[string]string{"Idempotency-Key": "undeclared", "Content-Type": ""}); r.status != http.StatusUnsupportedMediaType {
		t.Fatalf("a body not declared as JSON: %d %s, want 415", r.status, r.body)
	}
	r := s.request(t, http.MethodPost, path, "", map[string]string{"Idempotency-Key": "no-body"})
	if p := paymentOf(t, r); r.status != http.StatusCreated || p.Status != "VOIDED" {
		t.Fatalf("a void without a body: %d %s, want 201 VOIDED", r.status, r.body)
	}
	again := s.void(t, id, "no-body")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
		t.Fatalf("the same void with {}: %d %s, want its replay", again.status, again.body)
	}
	if net := s.provider.NetCaptured("pi_void_no_body"); net.Voids != 1 || len(net.Violations) > 0 {
		t.Fatalf("the provider's ledger: %+v, want one void", net)
	}
}

// Concurrent refunds of a partial capture give back no more than was
// captured: 25 refunds of 10.00 at once on 60.00 captured of 100.00
// authorized make exactly six, and the provider's ledger agrees.
func TestConcurrentRefundsNeverExceedTheCapture(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	id := s.authorize(t, 9801, "100.00", "pi_refund_capture")
	if r := s.capture(t, id, "cap", captureBody("60.00", "RUB", "cap_refunds")); r.status != http.StatusCreated {
		t.Fatalf("capture: %d %s", r.status, r.body)
	}
	statuses := make([]int, 25)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = s.request(t, http.MethodPost, fmt.Sprintf("/payments/%d/refunds", id),
				fmt.Sprintf(`{"amount":"10.00","externalRefundId":"re_c%d"}`, i),
				map[string]string{"Idempotency-Key": fmt.Sprintf("ref-%d", i)}).status
		})
	}
	wg.Wait()
	made := 0
	for _, st := range statuses {
		switch st {
		case http.StatusCreated:
			made++
		case http.StatusConflict:
		default:
			t.Errorf("a refund answered %d, want 201 or 409", st)
		}
	}
	if made != 6 {
		t.Fatalf("%d refunds made of 10.00 each on 60.00 captured, want 6 (%v)", made, statuses)
	}
	net := s.provider.NetCaptured("pi_refund_capture")
	if len(net.Violations) > 0 || !net.Captured.Equal(decimal.RequireFromString("60")) || !net.Net.IsZero() {
		t.Fatalf("the provider's ledger: %+v", net)
	}
}
