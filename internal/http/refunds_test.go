package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// paidPayment charges amount EUR for a new order and returns the payment's id.
func (s *testService) paidPayment(t testing.TB, order int64, amount string) int64 {
	t.Helper()
	s.addOrder(t, order, 7, amount, "EUR")
	resp := s.charge(t, fmt.Sprintf("charge-%d", order), chargeBody(order, 7, amount, "EUR", fmt.Sprintf("pay-%d", order)))
	if resp.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", resp.status, resp.body)
	}
	var p struct{ ID int64 }
	if err := json.Unmarshal(resp.body, &p); err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// refund posts a refund of payment with an idempotency key.
func (s *testService) refund(t testing.TB, payment int64, key, body string, headers ...string) response {
	t.Helper()
	h := map[string]string{"Idempotency-Key": key}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return s.request(t, http.MethodPost, "/payments/"+strconv.FormatInt(payment, 10)+"/refunds", body, h)
}

func refundBody(amount, external string) string {
	return `{"amount":"` + amount + `","externalRefundId":"` + external + `"}`
}

// problemCode reads a problem's code.
func problemCode(t testing.TB, body []byte) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem: %s", body)
	}
	return p.Code
}

// A refund is made once, its answer replayed byte for byte, its key
// refused for another refund; its event is in the outbox once, keyed by
// the order; the listing shows it to its client only.
func TestRefundIsMadeOnceAndReplayed(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	payment := s.paidPayment(t, 501, "100.00")

	first := s.refund(t, payment, "refund-1", refundBody("30.00", "r-1"))
	if first.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", first.status, first.body)
	}
	replay := s.refund(t, payment, "refund-1", refundBody("30.0", "r-1")) // the same refund, written otherwise
	if replay.status != http.StatusCreated || string(replay.body) != string(first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %q %s, want the first answer's bytes", replay.status, replay.header.Get("Idempotent-Replayed"), replay.body)
	}
	reused := s.refund(t, payment, "refund-1", refundBody("31.00", "r-1"))
	if reused.status != http.StatusConflict || problemCode(t, reused.body) != "idempotency-key-reused" {
		t.Fatalf("reused key: %d %s", reused.status, reused.body)
	}

	if got := s.count(t, `SELECT count(*) FROM refund WHERE status = 'SUCCEEDED' AND amount = 30`); got != 1 {
		t.Errorf("%d SUCCEEDED refunds, want 1", got)
	}
	if got := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = 30`, payment); got != 1 {
		t.Errorf("the payment's refund total is not 30")
	}
	if got := s.count(t, `SELECT count(*) FROM idempotency_record r JOIN refund f ON f.id = r.refund_id
		WHERE r.idempotency_key = 'refund-1' AND r.command = 'refund' AND r.status = 'COMPLETED' AND r.payment_id = f.payment_id`); got != 1 {
		t.Errorf("the key's record is not a completed refund record linked to its refund and its payment (the record names its refund's payment)")
	}
	if got := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1' AND message_key = '501'
		AND payload->>'externalRefundId' = 'r-1' AND payload->>'amount' = '30.00'`); got != 1 {
		t.Errorf("%d PaymentRefunded.v1 events keyed by the order, want 1", got)
	}
	if got := len(s.ledger(t).SucceededRefunds("r-1")); got != 1 {
		t.Errorf("the provider made %d refunds, want 1", got)
	}
	// Refund calls are counted with the charges, under outcomes of their
	// own: the replay and the reused key never reached the provider.
	if got := s.metric(t, `payment_provider_calls_total{outcome="refund_approved",provider="sandbox"}`); got != 1 {
		t.Errorf("refund calls counted as approved = %v, want 1", got)
	}

	list := s.request(t, http.MethodGet, fmt.Sprintf("/payments/%d/refunds", payment), "", nil)
	var l struct {
		Refunds []struct{ ExternalRefundID, Status, Amount string }
	}
	if err := json.Unmarshal(list.body, &l); err != nil || list.status != http.StatusOK || len(l.Refunds) != 1 ||
		l.Refunds[0].ExternalRefundID != "r-1" || l.Refunds[0].Status != "SUCCEEDED" || l.Refunds[0].Amount != "30.00" {
		t.Errorf("list: %d %s", list.status, list.body)
	}
	other := s.request(t, http.MethodGet, fmt.Sprintf("/payments/%d/refunds", payment), "", map[string]string{"Authorization": "Bearer " + otherKey})
	if other.status != http.StatusNotFound {
		t.Errorf("another client's listing: %d %s, want 404", other.status, other.body)
	}
}

// Twenty-five refunds of 10.00 at once on a payment of 100.00, each with
// its own key and external refund: exactly ten are made, the provider
// refunds 100.00 in all, and the others are told refund-exceeds-payment,
// with nothing stored for their keys.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	payment := s.paidPayment(t, 502, "100.00")

	const n = 25
	answers := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.refund(t, payment, fmt.Sprintf("concurrent-%d", i), refundBody("10.00", fmt.Sprintf("c-%d", i)))
		}()
	}
	wg.Wait()
	var made, exceeded int
	for _, a := range answers {
		switch {
		case a.status == http.StatusCreated:
			made++
		case a.status == http.StatusConflict && problemCode(t, a.body) == "refund-exceeds-payment":
			exceeded++
		default:
			t.Errorf("unexpected answer %d %s", a.status, a.body)
		}
	}
	if made != 10 || exceeded != n-10 {
		t.Fatalf("%d made, %d refund-exceeds-payment; want 10 and %d", made, exceeded, n-10)
	}
	total := decimal.Zero
	for _, r := range s.ledger(t).Refunds {
		if r.Status == sandboxprovider.StatusSucceeded {
			total = total.Add(r.Amount)
		}
	}
	if !total.Equal(decimal.NewFromInt(100)) {
		t.Errorf("the provider refunded %s, want 100.00", total)
	}
	if got := s.count(t, `SELECT count(*) FROM idempotency_record WHERE command = 'refund'`); got != 10 {
		t.Errorf("%d refund records stored, want 10 (an exceeding refund stores nothing)", got)
	}
	if got := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = amount`, payment); got != 1 {
		t.Errorf("the payment's refund total is not its amount")
	}
}

// The rare answers: which are stored for the key, and which are not.
func TestRefundRareAnswers(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	payment := s.paidPayment(t, 503, "100.00")
	s.addOrder(t, 504, 7, "50.00", "EUR")
	if r := s.charge(t, "declined", chargeBody(504, 7, "50.00", "EUR", "decline_504")); r.status != http.StatusPaymentRequired {
		t.Fatalf("declined charge: %d %s", r.status, r.body)
	}
	declined := int64(s.count(t, `SELECT id FROM payment WHERE order_id = 504`))
	if r := s.refund(t, payment, "recorded", refundBody("5.00", "known")); r.status != http.StatusCreated {
		t.Fatalf("first refund: %d %s", r.status, r.body)
	}

	for _, tc := range []struct {
		name    string
		payment int64
		body    string
		headers []string
		status  int
		code    string
		stored  bool
	}{
		{"unknown payment", 999999, refundBody("1.00", "x-1"), nil, http.StatusNotFound, "payment-not-found", false},
		{"another client's payment", payment, refundBody("1.00", "x-2"), []string{"Authorization", "Bearer " + otherKey}, http.StatusNotFound, "payment-not-found", false},
		{"a declined payment", declined, refundBody("1.00", "x-3"), nil, http.StatusConflict, "payment-not-refundable", false},
		{"more than the payment", payment, refundBody("100.01", "x-4"), nil, http.StatusConflict, "refund-exceeds-payment", false},
		{"more than is left", payment, refundBody("95.01", "x-5"), nil, http.StatusConflict, "refund-exceeds-payment", false},
		{"the same external refund", payment, refundBody("5", "known"), nil, http.StatusOK, "", true},
		{"another refund's external id", payment, refundBody("6.00", "known"), nil, http.StatusConflict, "external-refund-conflict", true},
		{"missing amount", payment, `{"externalRefundId":"x-6"}`, nil, http.StatusBadRequest, "validation-failed", false},
		{"negative amount", payment, refundBody("-1", "x-7"), nil, http.StatusBadRequest, "validation-failed", false},
		{"unknown field", payment, `{"amount":"1","externalRefundId":"x-8","currency":"EUR"}`, nil, http.StatusBadRequest, "validation-failed", false},
		{"repeated field", payment, `{"amount":"1","amount":"2","externalRefundId":"x-9"}`, nil, http.StatusBadRequest, "validation-failed", false},
		{"malformed", payment, `{"amount":`, nil, http.StatusBadRequest, "malformed-json", false},
	} {
		key := "rare-" + tc.name
		r := s.refund(t, tc.payment, key, tc.body, tc.headers...)
		if r.status != tc.status || (tc.code != "" && problemCode(t, r.body) != tc.code) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
		stored := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1 AND status = 'COMPLETED'`, key) == 1
		if stored != tc.stored {
			t.Errorf("%s: stored %v, want %v", tc.name, stored, tc.stored)
		}
	}
	if got := s.count(t, `SELECT count(*) FROM refund`); got != 1 {
		t.Errorf("%d refund rows, want the one made", got)
	}
	if got := s.count(t, `SELECT count(*) FROM idempotency_record WHERE status = 'IN_PROGRESS'`); got != 0 {
		t.Errorf("%d claims left in progress", got)
	}
}

// The provider's answers that are not a plain approval: a lost answer is
// 503 outcome-unknown with the refund kept PENDING, and the retry records
// it once; a refusal for good is FAILED with its amount given back.
func TestRefundProviderOutcomes(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	payment := s.paidPayment(t, 505, "100.00")

	lost := s.refund(t, payment, "lost", refundBody("40.00", "drop_r"))
	if lost.status != http.StatusServiceUnavailable || problemCode(t, lost.body) != "outcome-unknown" {
		t.Fatalf("lost answer: %d %s", lost.status, lost.body)
	}
	// One problem type for a charge and a refund: its title names neither.
	if !strings.Contains(string(lost.body), `"title":"Outcome unknown"`) {
		t.Errorf("the outcome-unknown problem's title: %s", lost.body)
	}
	if got := s.count(t, `SELECT count(*) FROM refund WHERE external_refund_id = 'drop_r' AND status = 'PENDING'`); got != 1 {
		t.Fatalf("the refund is not kept PENDING after a lost answer")
	}
	retry := s.refund(t, payment, "lost", refundBody("40.00", "drop_r"))
	if retry.status != http.StatusCreated {
		t.Fatalf("retry: %d %s", retry.status, retry.body)
	}
	if got := len(s.ledger(t).SucceededRefunds("drop_r")); got != 1 {
		t.Errorf("the provider made %d refunds, want 1", got)
	}
	if got := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'PaymentRefunded.v1' AND payload->>'externalRefundId' = 'drop_r'`); got != 1 {
		t.Errorf("%d events, want 1", got)
	}

	refused := s.refund(t, payment, "refused", refundBody("60.00", "refuse_r"))
	if refused.status != http.StatusUnprocessableEntity || problemCode(t, refused.body) != "refund-failed" {
		t.Fatalf("refused: %d %s", refused.status, refused.body)
	}
	if got := s.count(t, `SELECT count(*) FROM refund WHERE external_refund_id = 'refuse_r' AND status = 'FAILED'`); got != 1 {
		t.Errorf("the refused refund is not FAILED")
	}
	if got := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = 40`, payment); got != 1 {
		t.Errorf("the failed refund's amount was not given back")
	}
	if got := s.count(t, `SELECT count(*) FROM outbox_event WHERE event_type = 'RefundFailed.v1'`); got != 1 {
		t.Errorf("%d RefundFailed.v1 events, want 1", got)
	}
	// Its amount is free again.
	if r := s.refund(t, payment, "after-refusal", refundBody("60.00", "r-after")); r.status != http.StatusCreated {
		t.Errorf("refund after the refusal: %d %s", r.status, r.body)
	}
}

// A refund the provider did not make, for now, gives its key and its
// amount back in one transaction; a claim of the same key locks the
// payment and then the key. The release must take them in that order too,
// or the two wait on each other until PostgreSQL breaks the cycle by
// failing one (SQLSTATE 40P01), found by the fault suite's seeded rounds.
// Here a trigger holds the release inside its delete of the key for a
// moment, and the test's own transaction takes the locks as a claim does,
// meanwhile.
func TestRefundReleaseTakesLocksInTheClaimsOrder(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	ctx := context.Background()
	payment := s.paidPayment(t, 512, "100.00")
	const key = "released-while-claimed"
	for _, stmt := range []string{
		`CREATE FUNCTION hold_the_release() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN PERFORM pg_sleep(1); RETURN OLD; END $$`,
		`CREATE TRIGGER hold_the_release BEFORE DELETE ON idempotency_record
		 FOR EACH ROW WHEN (OLD.idempotency_key = '` + key + `') EXECUTE FUNCTION hold_the_release()`,
	} {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}

	released := make(chan response, 1)
	go func() { released <- s.refund(t, payment, key, refundBody("40.00", "fail_released")) }()
	// The release is inside its delete of the key, which it has locked.
	waitFor(t, func() bool {
		return s.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep'`) == 1
	})
	claimErr := func() error {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // undoes nothing after the commit; before it, the error returned says why
		if _, err := tx.Exec(ctx, `SELECT 1 FROM payment WHERE id = $1 FOR NO KEY UPDATE`, payment); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM idempotency_record WHERE idempotency_key = $1 FOR UPDATE`, key); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}()
	if claimErr != nil {
		t.Errorf("a claim's locks while the key is released: %v", claimErr)
	}
	r := <-released
	if r.status != http.StatusServiceUnavailable || problemCode(t, r.body) != "provider-unavailable" {
		t.Errorf("the refund the provider did not make: %d %s; want 503 provider-unavailable (key and amount given back)", r.status, r.body)
	}
	if strings.Contains(string(r.body), "did not charge") {
		t.Errorf("a refund's provider-unavailable speaks of a charge: %s", r.body)
	}
	if got := s.count(t, `SELECT count(*) FROM payment WHERE id = $1 AND refund_reserved = 0`, payment); got != 1 {
		t.Error("the refund's amount was not given back")
	}
	if got := s.count(t, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, key); got != 0 {
		t.Error("the key was not released")
	}
}
