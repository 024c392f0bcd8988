package http_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
	"github.com/example/payment-service/internal/webhooksig"
)

// The secrets the test services verify deliveries with.
const (
	webhookSecret    = "whsec_test_current_0123456789" //nolint:gosec // G101: the test services' own secret
	webhookOldSecret = "whsec_test_previous_987654321" //nolint:gosec // G101: the test services' own secret
)

// startWebhookService runs the service with webhooks on (secrets, comma
// separated) and a sandbox provider configured by provider.
func startWebhookService(t *testing.T, secrets string, provider sandboxprovider.Config, opts ...startOption) *testService {
	t.Helper()
	return startServiceWith(t, testdb.New(t), map[string]string{"WEBHOOK_SECRETS": secrets}, provider, opts...)
}

// deliver posts a delivery as the provider does: the body, signed with
// the header given (no API key).
func (s *testService) deliver(t testing.TB, body []byte, signature string) response {
	t.Helper()
	h := map[string]string{"Authorization": ""}
	if signature != "" {
		h[webhooksig.Header] = signature
	}
	return s.request(t, http.MethodPost, "/webhooks/sandbox", string(body), h)
}

// deliverSigned posts body signed now with secrets.
func (s *testService) deliverSigned(t testing.TB, body []byte, secrets ...string) response {
	t.Helper()
	keys := make([][]byte, len(secrets))
	for i, k := range secrets {
		keys[i] = []byte(k)
	}
	return s.deliver(t, body, webhooksig.Sign(time.Now(), body, keys...))
}

// providerEvent is a delivery's body: data is the object as the
// provider's lookup answers it.
func providerEvent(t testing.TB, id, typ string, data any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "type": typ, "created": time.Now().UTC().Format(time.RFC3339), "data": data})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// providerAnswer is the provider's answer for the charge or refund with
// reference ref, from its ledger: what an event about it carries as data.
func (s *testService) providerAnswer(t testing.TB, ref string) any {
	t.Helper()
	l := s.ledger(t)
	for _, c := range l.Charges {
		if c.Reference == ref {
			return c.ChargeAnswer
		}
	}
	for _, r := range l.Refunds {
		if r.Reference == ref {
			return r.RefundAnswer
		}
	}
	for _, a := range l.Authorizations {
		if a.Reference == ref {
			return a.AuthorizationState
		}
	}
	for _, c := range l.Captures {
		if c.Reference == ref {
			return c.CaptureAnswer
		}
	}
	t.Fatalf("the provider holds nothing with reference %s", ref)
	return nil
}

// webhookResult is a 2xx delivery's result.
func webhookResult(t testing.TB, r response) string {
	t.Helper()
	var v struct{ Result string }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &v) != nil {
		t.Fatalf("delivery: %d %s, want 200 with a result", r.status, r.body)
	}
	return v.Result
}

// webhookEvents is payment_provider_events_total for result.
func (s *testService) webhookEvents(t testing.TB, result string) float64 {
	t.Helper()
	return s.metric(t, `payment_provider_events_total{provider="sandbox",result="`+result+`"}`)
}

// pendingCharge charges order with a drop_ reference: the provider
// charges and the answer is lost, so the payment stays PENDING.
func (s *testService) pendingCharge(t testing.TB, order int64, key, ref string) {
	t.Helper()
	s.addOrder(t, order, 42, "250.75", "RUB")
	first := s.charge(t, key, chargeBody(order, 42, "250.75", "RUB", ref))
	if first.status != http.StatusServiceUnavailable {
		t.Fatalf("a lost answer: %d %s, want 503 outcome-unknown", first.status, first.body)
	}
}

// A charge whose answer was lost (drop_: the provider charged) is
// resolved by the provider's event at once, by no retry and no completer
// run (the provider is asked once in all): its key then replays the
// stored SUCCEEDED. The event is delivered five times at once, as an
// at-least-once sender may: it is applied once (one response, one outbox
// event, one processed_event row) and every delivery is answered 200.
func TestWebhookResolvesALostChargeAnswerOnce(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{})
	s.pendingCharge(t, 3001, "wh-key-1", "drop_wh1")
	if st := s.state(t, "wh-key-1", 3001, "drop_wh1"); st.payments["PENDING"] != 1 || st.events != 0 {
		t.Fatalf("before the event: %+v, want a PENDING payment and no event", st)
	}

	body := providerEvent(t, "evt_wh1", "charge.succeeded", s.providerAnswer(t, "drop_wh1"))
	results := make([]string, 5)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = webhookResult(t, s.deliverSigned(t, body, webhookSecret)) })
	}
	wg.Wait()
	applied := 0
	for _, r := range results {
		switch r {
		case "applied":
			applied++
		case "duplicate":
		default:
			t.Errorf("a delivery's result %q, want applied or duplicate", r)
		}
	}
	if applied != 1 {
		t.Fatalf("results %v: want the event applied exactly once", results)
	}

	st := s.state(t, "wh-key-1", 3001, "drop_wh1")
	if st.recordStatus != "COMPLETED" || st.recordHTTP != http.StatusCreated ||
		st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 || st.events != 1 || len(st.charged) != 1 {
		t.Fatalf("after five deliveries: %+v; want COMPLETED 201, one SUCCEEDED payment, one event, one charge", st)
	}
	if n := s.count(t, `SELECT count(*) FROM processed_event WHERE consumer_name = 'webhook:sandbox'`); n != 1 {
		t.Fatalf("processed_event rows: %d, want 1", n)
	}
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls: %v, want only the first: the event, not a retry or lookup, resolved it", calls)
	}

	replay := s.charge(t, "wh-key-1", chargeBody(3001, 42, "250.75", "RUB", "drop_wh1"))
	if replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" ||
		decode[paymentJSON](t, replay).Status != "SUCCEEDED" {
		t.Fatalf("replay: %d %s, want the stored 201 SUCCEEDED", replay.status, replay.body)
	}
	if calls := s.providerCalls(t); calls != 1 {
		t.Fatalf("provider calls after the replay: %v, want 1", calls)
	}
	if got := s.webhookEvents(t, "applied") + s.webhookEvents(t, "duplicate"); got != 5 {
		t.Fatalf("payment_provider_events_total applied+duplicate = %v, want 5", got)
	}
}

// The same for a refund whose answer was lost.
func TestWebhookResolvesALostRefundAnswer(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{})
	payment := s.paidPayment(t, 3101, "80.00")
	body := refundBody("30.00", "drop_whr1")
	if first := s.refund(t, payment, "wh-refund-1", body); first.status != http.StatusServiceUnavailable {
		t.Fatalf("a lost refund answer: %d %s, want 503", first.status, first.body)
	}
	if n := s.count(t, `SELECT count(*) FROM refund WHERE status = 'PENDING'`); n != 1 {
		t.Fatalf("PENDING refunds: %d, want 1", n)
	}

	event := providerEvent(t, "evt_whr1", "refund.succeeded", s.providerAnswer(t, "drop_whr1"))
	for range 2 {
		s.deliverSigned(t, event, webhookSecret)
	}
	if n := s.count(t, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED'`); n != 1 {
		t.Fatalf("SUCCEEDED refunds: %d, want 1", n)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type LIKE 'PaymentRefunded%'`); n != 1 {
		t.Fatalf("refund events: %d, want 1", n)
	}
	replay := s.refund(t, payment, "wh-refund-1", body)
	if replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" ||
		!strings.Contains(string(replay.body), `"SUCCEEDED"`) {
		t.Fatalf("replay: %d %s, want the stored 201 SUCCEEDED", replay.status, replay.body)
	}
}

// A refused delivery stores nothing, and its problem says only that it is
// not authenticated (or not an event, or too large); which check failed is
// in the log, and no secret is in the log or on /health.
func TestWebhookRefusesUnauthenticatedDeliveries(t *testing.T) {
	t.Parallel()
	logs := &servicetest.LogBuffer{}
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{}, func(o *startOptions) { o.logs = logs })
	s.pendingCharge(t, 3201, "wh-refuse", "drop_whx")
	good := providerEvent(t, "evt_whx", "charge.succeeded", s.providerAnswer(t, "drop_whx"))
	tampered := bytes.Replace(good, []byte(`"250.75"`), []byte(`"2.75"`), 1)
	if bytes.Equal(tampered, good) {
		t.Fatalf("the test's event has no amount to tamper with: %s", good)
	}
	now := time.Now()
	tests := []struct {
		name      string
		body      []byte
		signature string
		status    int
		code      string
	}{
		{"no signature", good, "", http.StatusUnauthorized, "webhook-signature-invalid"},
		{"malformed signature", good, "v1=abc", http.StatusUnauthorized, "webhook-signature-invalid"},
		{"forged: another secret", good, webhooksig.Sign(now, good, []byte("whsec_forger_0123456789")), http.StatusUnauthorized, "webhook-signature-invalid"},
		{"stale timestamp", good, webhooksig.Sign(now.Add(-6*time.Minute), good, []byte(webhookSecret)), http.StatusUnauthorized, "webhook-signature-invalid"},
		{"tampered body", tampered, webhooksig.Sign(now, good, []byte(webhookSecret)), http.StatusUnauthorized, "webhook-signature-invalid"},
		{"signed, not an event", []byte(`{"id":"evt_1"}`), webhooksig.Sign(now, []byte(`{"id":"evt_1"}`), []byte(webhookSecret)), http.StatusBadRequest, "webhook-event-invalid"},
		{"over the cap", bytes.Repeat([]byte(" "), 64<<10+1), "t=1,v1=00", http.StatusRequestEntityTooLarge, "payload-too-large"},
	}
	for _, tc := range tests {
		r := s.deliver(t, tc.body, tc.signature)
		p := wantProblem(t, r, tc.status, tc.code)
		if strings.Contains(p.Detail, "stale") || strings.Contains(p.Detail, "match") {
			t.Errorf("%s: the problem tells which check failed: %s", tc.name, r.body)
		}
	}
	st := s.state(t, "wh-refuse", 3201, "drop_whx")
	if st.payments["PENDING"] != 1 || st.events != 0 || st.recordStatus != "IN_PROGRESS" {
		t.Fatalf("after refused deliveries: %+v; want the PENDING payment untouched", st)
	}
	if n := s.count(t, `SELECT count(*) FROM processed_event`) + s.count(t, `SELECT count(*) FROM provider_event_contradiction`); n != 0 {
		t.Fatalf("refused deliveries stored %d rows", n)
	}

	health := s.request(t, http.MethodGet, "/health", "", map[string]string{"Authorization": ""})
	for _, where := range []struct{ name, text string }{{"the log", logs.String()}, {"/health", string(health.body)}} {
		if strings.Contains(where.text, webhookSecret) {
			t.Errorf("%s holds the webhook secret", where.name)
		}
	}
	if !strings.Contains(logs.String(), webhooksig.ErrStale.Error()) || !strings.Contains(logs.String(), webhooksig.ErrNoMatch.Error()) {
		t.Errorf("the log does not say which check refused the deliveries:\n%s", logs.String())
	}
}

// With two secrets (a rotation under way) a delivery signed with either,
// or with both, is taken; a third is not.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret+","+webhookOldSecret, sandboxprovider.Config{})
	s.pendingCharge(t, 3301, "wh-rotate", "drop_whrot")
	data := s.providerAnswer(t, "drop_whrot")
	tests := []struct {
		name    string
		secrets []string
		status  int
	}{
		{"the new secret", []string{webhookSecret}, http.StatusOK},
		{"the old secret", []string{webhookOldSecret}, http.StatusOK},
		{"both, as a sender rotating signs", []string{"whsec_unknown_0123456789", webhookOldSecret}, http.StatusOK},
		{"neither", []string{"whsec_unknown_0123456789"}, http.StatusUnauthorized},
	}
	for i, tc := range tests {
		r := s.deliverSigned(t, providerEvent(t, "evt_rot"+strconv.Itoa(i), "charge.succeeded", data), tc.secrets...)
		if r.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
		}
	}
	if st := s.state(t, "wh-rotate", 3301, "drop_whrot"); st.payments["SUCCEEDED"] != 1 || st.events != 1 {
		t.Fatalf("after the deliveries: %+v, want SUCCEEDED with one event", st)
	}
}

// An event that contradicts a final payment changes nothing: it is kept,
// byte for byte, for an operator, counted, and answered 200 (the provider
// has delivered it; sending it again would change nothing).
func TestWebhookContradictionIsKeptAndCounted(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{})
	s.addOrder(t, 3401, 42, "10.00", "EUR")
	if r := s.charge(t, "wh-contra", chargeBody(3401, 42, "10.00", "EUR", "pay_contra")); r.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	charged := s.providerAnswer(t, "pay_contra").(sandboxprovider.ChargeAnswer)
	declined := charged
	declined.Status = sandboxprovider.StatusDeclined
	otherAmount := charged
	otherAmount.Amount = otherAmount.Amount.Add(otherAmount.Amount)
	otherCurrency := charged
	otherCurrency.Currency = "USD"
	tests := []struct {
		name, id, typ string
		data          any
		reason        string
	}{
		{"declined for a SUCCEEDED payment", "evt_c1", "charge.declined", declined, "DECLINED"},
		{"another amount", "evt_c2", "charge.succeeded", otherAmount, "20"},
		{"another currency", "evt_c3", "charge.succeeded", otherCurrency, "USD"},
	}
	for i, tc := range tests {
		body := providerEvent(t, tc.id, tc.typ, tc.data)
		for range 2 { // the redelivery is a duplicate, kept once
			if got := webhookResult(t, s.deliverSigned(t, body, webhookSecret)); got != "contradiction" && got != "duplicate" {
				t.Fatalf("%s: result %q, want contradiction", tc.name, got)
			}
		}
		var kept, reason string
		if err := s.db.QueryRow(t.Context(), `SELECT event::text, reason FROM provider_event_contradiction WHERE event_id = $1`, tc.id).Scan(&kept, &reason); err != nil {
			t.Fatalf("%s: not kept: %v", tc.name, err)
		}
		if kept != string(body) || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: kept %s (%s), want the delivery byte for byte, its reason naming %s", tc.name, kept, reason, tc.reason)
		}
		if got := s.webhookEvents(t, "contradiction"); got != float64(i+1) {
			t.Errorf("%s: contradictions counted %v, want %d", tc.name, got, i+1)
		}
	}
	st := s.state(t, "wh-contra", 3401, "pay_contra")
	if st.payments["SUCCEEDED"] != 1 || len(st.payments) != 1 || st.events != 1 {
		t.Fatalf("after the contradictions: %+v, want the SUCCEEDED payment and its one event, unchanged", st)
	}
}

// An event for an object the service does not hold is answered 404, so
// the provider delivers it again for its bounded time (decision 0021);
// nothing is stored, so a redelivery after the object appears applies.
func TestWebhookForAnUnknownObjectIsRetried(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{})
	body := providerEvent(t, "evt_unknown", "charge.succeeded", map[string]any{
		"id": "ch_1", "idempotencyKey": "sandbox:nobody", "status": "succeeded", "amount": "1.00", "currency": "EUR",
	})
	wantProblem(t, s.deliverSigned(t, body, webhookSecret), http.StatusNotFound, "webhook-object-unknown")
	if n := s.count(t, `SELECT count(*) FROM processed_event`); n != 0 {
		t.Fatalf("processed_event rows: %d, want none: the redelivery must be applied", n)
	}
}

// Webhooks without a secret answer 503, so a provider that sends anyway
// keeps its events and retries.
func TestWebhookWithoutSecretsIsUnavailable(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	body := providerEvent(t, "evt_1", "charge.succeeded", map[string]any{})
	wantProblem(t, s.deliverSigned(t, body, webhookSecret), http.StatusServiceUnavailable, "webhooks-not-configured")
}

// An event and the live request's own phase 3 record the same decision at
// once: whichever commits first records it, and the other sees it and
// agrees. Exactly one outbox event, and the request answers the stored
// response. Half the rounds deliver the event once the PENDING payment
// exists (the request is then in its provider call), some of them later,
// about when the call ends; the others at once, retrying a 404 (the
// payment not reserved yet) as the provider would.
func TestWebhookRacesALiveRequest(t *testing.T) {
	t.Parallel()
	s := startWebhookService(t, webhookSecret, sandboxprovider.Config{Latency: 30 * time.Millisecond})
	const rounds = 16
	for i := range rounds {
		order := int64(3500 + i)
		ref := fmt.Sprintf("race_%d", i)
		key := "wh-race-" + strconv.Itoa(i)
		s.addOrder(t, order, 42, "7.00", "EUR")
		data := map[string]any{"id": "ch_" + ref, "idempotencyKey": "sandbox:" + ref, "status": "succeeded",
			"amount": "7.00", "currency": "EUR", "reference": ref}
		body := providerEvent(t, "evt_"+ref, "charge.succeeded", data)

		var answer response
		done := make(chan struct{})
		go func() {
			defer close(done)
			answer = s.charge(t, key, chargeBody(order, 42, "7.00", "EUR", ref))
		}()
		if i%2 == 0 {
			for range 500 { // bounded: the payment is reserved within milliseconds
				if s.count(t, `SELECT count(*) FROM payment WHERE order_id = $1`, order) > 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			// From inside the provider call to about its end, when the
			// request's own phase 3 runs.
			time.Sleep(time.Duration(i/2%4) * 10 * time.Millisecond)
		}
		var delivered response
		for range 200 {
			if delivered = s.deliverSigned(t, body, webhookSecret); delivered.status != http.StatusNotFound {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		<-done
		if r := webhookResult(t, delivered); r != "applied" && r != "agreed" {
			t.Fatalf("round %d: delivery result %q", i, r)
		}
		if answer.status != http.StatusCreated || decode[paymentJSON](t, answer).Status != "SUCCEEDED" {
			t.Fatalf("round %d: the live request answered %d %s, want 201 SUCCEEDED", i, answer.status, answer.body)
		}
		replay := s.charge(t, key, chargeBody(order, 42, "7.00", "EUR", ref))
		if !bytes.Equal(replay.body, answer.body) {
			t.Fatalf("round %d: the stored answer %s differs from the live one %s", i, replay.body, answer.body)
		}
		if st := s.state(t, key, order, ref); st.events != 1 || st.payments["SUCCEEDED"] != 1 || st.recordStatus != "COMPLETED" {
			t.Fatalf("round %d: %+v, want one SUCCEEDED payment with one event", i, st)
		}
	}
	t.Logf("applied by the event %v times, agreed %v times", s.webhookEvents(t, "applied"), s.webhookEvents(t, "agreed"))
}

// Events out of order: a refund's event before its charge's, and a
// charge's event long after the completer settled the charge (asking the
// provider). Each ends in the state the provider decided, with one event
// per decision. The completer runs every second here, so the refund's
// event may find its refund PENDING (applied) or settled (agreed).
func TestWebhookEventsOutOfOrderAndLate(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), map[string]string{
		"WEBHOOK_SECRETS": webhookSecret, "CHARGE_COMPLETER_CRON": "* * * * * *", "CHARGE_COMPLETER_GRACE": "0s",
	}, sandboxprovider.Config{})
	// The charge's answer is lost, and the completer settles it.
	s.pendingCharge(t, 3601, "wh-late", "drop_whlate")
	for i := 0; s.state(t, "wh-late", 3601, "drop_whlate").recordStatus != "COMPLETED"; i++ {
		if i == 100 {
			t.Fatal("the completer did not settle the charge within 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var payment int64
	if err := s.db.QueryRow(t.Context(), `SELECT id FROM payment WHERE order_id = 3601`).Scan(&payment); err != nil {
		t.Fatal(err)
	}
	// A refund whose answer is lost too.
	if r := s.refund(t, payment, "wh-late-refund", refundBody("50.00", "drop_whlater")); r.status != http.StatusServiceUnavailable {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	// The refund's event comes first, then the charge's, late.
	refundEvent := providerEvent(t, "evt_late_refund", "refund.succeeded", s.providerAnswer(t, "drop_whlater"))
	chargeEvent := providerEvent(t, "evt_late_charge", "charge.succeeded", s.providerAnswer(t, "drop_whlate"))
	if got := webhookResult(t, s.deliverSigned(t, refundEvent, webhookSecret)); got != "applied" && got != "agreed" {
		t.Fatalf("the refund's event: %q, want applied (or agreed, after the completer)", got)
	}
	if got := webhookResult(t, s.deliverSigned(t, chargeEvent, webhookSecret)); got != "agreed" {
		t.Fatalf("the charge's late event: %q, want agreed", got)
	}
	if st := s.state(t, "wh-late", 3601, "drop_whlate"); st.payments["SUCCEEDED"] != 1 || st.events != 2 {
		t.Fatalf("%+v: want the payment SUCCEEDED, with its event and the refund's", st)
	}
	if n := s.count(t, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED' AND payment_id = $1`, payment); n != 1 {
		t.Fatalf("SUCCEEDED refunds: %d, want 1", n)
	}
	if n := s.count(t, `SELECT count(*) FROM provider_event_contradiction`); n != 0 {
		t.Fatalf("contradictions: %d, want none", n)
	}
}
