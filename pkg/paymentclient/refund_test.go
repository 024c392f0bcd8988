package paymentclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
	"github.com/example/payment-service/pkg/paymentclient"
)

// refundStack is the real service and its sandbox provider, with orders
// 1001 to 1010 (customer 42, 100.50 RUB) to charge.
type refundStack struct {
	svc    *servicetest.Service
	client *paymentclient.Client
}

func startRefundStack(t *testing.T) refundStack {
	t.Helper()
	svc := servicetest.Start(t, servicetest.Options{DSN: testdb.New(t)})
	if _, err := svc.DB.Exec(context.Background(), `INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT id, 42, 100.50, 'RUB' FROM generate_series(1001, 1010) AS id`); err != nil {
		t.Fatal(err)
	}
	return refundStack{svc: svc, client: newFastClient(t, svc.URL)}
}

// newFastClient is a client of baseURL that retries soon and a few times.
func newFastClient(t *testing.T, baseURL string) *paymentclient.Client {
	t.Helper()
	c, err := paymentclient.New(paymentclient.Config{BaseURL: baseURL, APIKey: "demo-secret",
		Retry: paymentclient.RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxAttempts: 4}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// charge pays order with the external payment id external and returns the
// payment (SUCCEEDED, or DECLINED for a decline_ id).
func (s refundStack) charge(t *testing.T, order int64, external string) paymentclient.Payment {
	t.Helper()
	res, err := s.client.Charge(context.Background(), paymentclient.NewIdempotencyKey(), paymentclient.ChargeRequest{
		OrderID: order, CustomerID: 42, Amount: "100.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: external})
	var declined *paymentclient.DeclinedError
	switch {
	case err == nil:
		return res.Payment
	case errors.As(err, &declined):
		return declined.Payment
	}
	t.Fatalf("charge of order %d: %v", order, err)
	return paymentclient.Payment{}
}

// Every answer the service gives a refund, through the client: the refund,
// its replay, and each refusal as the error to switch on, in the order a
// caller meets them on one payment of 100.50. The provider refunds once
// per external refund, whatever the client sends.
func TestRefundAnswersThroughTheRealService(t *testing.T) {
	t.Parallel()
	s := startRefundStack(t)
	ctx := context.Background()
	paid := s.charge(t, 1001, "pi_refund_paid")
	declined := s.charge(t, 1002, "decline_refund_paid")
	keyA := paymentclient.NewIdempotencyKey()

	steps := []struct {
		name      string
		key       string
		paymentID int64
		req       paymentclient.RefundRequest
		is        error  // the error wanted; nil: a refund
		created   bool   // 201, not 200
		replayed  bool   // Idempotent-Replayed
		status    string // the refund's status, on the answer or in Problem.Refund
	}{
		{"a partial refund", keyA, paid.ID, refund("40.00", "re_a"), nil, true, false, "SUCCEEDED"},
		{"its replay: the same answer, nothing refunded again", keyA, paid.ID, refund("40.00", "re_a"), nil, true, true, "SUCCEEDED"},
		{"the same key for another refund", keyA, paid.ID, refund("41.00", "re_a"), paymentclient.ErrKeyReused, false, false, ""},
		{"beyond what is left (60.50)", "k-exceeds", paid.ID, refund("60.51", "re_b"), paymentclient.ErrRefundExceedsPayment, false, false, ""},
		{"declined by the provider", "k-decline", paid.ID, refund("10.00", "decline_re_c"), paymentclient.ErrRefundDeclined, false, false, "DECLINED"},
		{"refused by the provider for good", "k-refuse", paid.ID, refund("10.00", "refuse_re_d"), paymentclient.ErrRefundFailed, false, false, "FAILED"},
		{"a recorded external refund id for another refund", "k-conflict", paid.ID, refund("10.00", "re_a"), paymentclient.ErrExternalRefundConflict, false, false, ""},
		{"a recorded external refund id for this refund, under a new key", "k-second-layer", paid.ID, refund("40.00", "re_a"), nil, false, false, "SUCCEEDED"},
		{"what is left, exactly", "k-rest", paid.ID, refund("60.50", "re_e"), nil, true, false, "SUCCEEDED"},
		{"a payment that is not SUCCEEDED", "k-declined-payment", declined.ID, refund("1.00", "re_f"), paymentclient.ErrPaymentNotRefundable, false, false, ""},
		{"no such payment", "k-missing", 999_999, refund("1.00", "re_g"), paymentclient.ErrPaymentNotFound, false, false, ""},
		{"an invalid amount", "k-invalid", paid.ID, refund("-1", "re_h"), paymentclient.ErrValidation, false, false, ""},
	}
	var refundA int64
	for _, st := range steps {
		res, err := s.client.Refund(ctx, st.key, st.paymentID, st.req)
		if st.is == nil {
			if err != nil || res.Created != st.created || res.Replayed != st.replayed || res.Refund.Status != st.status ||
				res.Refund.Amount != st.req.Amount || res.Refund.Currency != "RUB" || res.Refund.PaymentID != st.paymentID || res.Attempts != 1 {
				t.Fatalf("%s: %+v, %v; want a %s refund, created %v, replayed %v, in one attempt", st.name, res, err, st.status, st.created, st.replayed)
			}
			if st.req.ExternalRefundID == "re_a" {
				if refundA != 0 && res.Refund.ID != refundA {
					t.Fatalf("%s: refund %d, want refund %d again", st.name, res.Refund.ID, refundA)
				}
				refundA = res.Refund.ID
			}
			continue
		}
		var p *paymentclient.Problem
		if !errors.Is(err, st.is) || !errors.As(err, &p) {
			t.Fatalf("%s: %+v, %v; want %v", st.name, res, err, st.is)
		}
		if st.status != "" && (p.Refund == nil || p.Refund.Status != st.status || p.Refund.ExternalRefundID != st.req.ExternalRefundID) {
			t.Fatalf("%s: the problem's refund is %+v, want the %s refund %s", st.name, p.Refund, st.status, st.req.ExternalRefundID)
		}
	}

	list, err := s.client.Refunds(ctx, paid.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range list {
		got = append(got, r.ExternalRefundID+" "+r.Amount+" "+r.Status)
	}
	want := []string{"re_a 40.00 SUCCEEDED", "decline_re_c 10.00 DECLINED", "refuse_re_d 10.00 FAILED", "re_e 60.50 SUCCEEDED"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Refunds = %v, want %v", got, want)
	}
	if _, err := s.client.Refunds(ctx, 999_999); !errors.Is(err, paymentclient.ErrPaymentNotFound) {
		t.Errorf("Refunds of no such payment: %v, want ErrPaymentNotFound", err)
	}
	ledger := s.svc.Provider.Ledger()
	for _, ref := range []string{"re_a", "re_e"} {
		if got := len(ledger.SucceededRefunds(ref)); got != 1 {
			t.Errorf("refunds %s at the provider = %d, want 1", ref, got)
		}
	}
	if _, total := ledger.Refunded("pi_refund_paid"); total.String() != "100.5" {
		t.Errorf("refunded at the provider: %s, want 100.5 (the whole payment, once)", total)
	}
}

func refund(amount, external string) paymentclient.RefundRequest {
	return paymentclient.RefundRequest{Amount: amount, ExternalRefundID: external}
}

// A refund whose answer is lost after the provider refunded (the provider
// drops its answer to the service, or a gateway drops the service's answer
// to the client) is retried by the client with the same key and body: the
// retry gets the refund, and the provider refunded once.
func TestARefundWhoseAnswerIsLostIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	s := startRefundStack(t)
	ctx := context.Background()
	tests := []struct {
		name     string
		external string // drop_: the provider refunds, then drops its answer to the service
		gateway  int    // a gateway's status in place of the service's first answers; 0: none
		fail     int    // how many answers the gateway replaces
		attempts int
		replayed bool
	}{
		// The service answers 503 outcome-unknown; its retry asks the
		// provider again with the same provider key and records the refund.
		{"the provider's answer is lost", "drop_re_lost", 0, 0, 2, false},
		// The service refunded and stored its answer: the retry replays it.
		{"a gateway's 502 after the refund", "re_gw502", 502, 1, 2, true},
		{"a gateway's 504 twice after the refund", "re_gw504", 504, 2, 3, true},
	}
	for i, tc := range tests {
		payment := s.charge(t, int64(1003+i), fmt.Sprintf("pi_lost_%d", i))
		g := &gateway{fail: tc.fail, status: tc.gateway}
		client := s.client
		if tc.gateway != 0 {
			client = newFastClient(t, g.start(t, s.svc.URL))
		}
		key := paymentclient.NewIdempotencyKey()

		res, err := client.Refund(ctx, key, payment.ID, refund("25.00", tc.external))

		if err != nil || !res.Created || res.Replayed != tc.replayed || res.Attempts != tc.attempts || res.Refund.Status != "SUCCEEDED" {
			t.Fatalf("%s: %+v, %v; want the refund SUCCEEDED on attempt %d, replayed %v", tc.name, res, err, tc.attempts, tc.replayed)
		}
		for _, k := range g.forwarded() {
			if k != key {
				t.Fatalf("%s: the gateway forwarded keys %v; every attempt must send %q", tc.name, g.forwarded(), key)
			}
		}
		if got := len(s.svc.Provider.Ledger().SucceededRefunds(tc.external)); got != 1 {
			t.Errorf("%s: refunds at the provider = %d, want 1", tc.name, got)
		}
		if got := s.svc.Count(t, `SELECT count(*) FROM refund WHERE external_refund_id = $1 AND status = 'SUCCEEDED'`, tc.external); got != 1 {
			t.Errorf("%s: SUCCEEDED refund rows = %d, want 1", tc.name, got)
		}
	}
}
