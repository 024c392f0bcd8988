package paymentclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/example/payment-service/pkg/paymentclient"
)

// authorize authorizes order (100.50 RUB of customer 42) under a new key
// and returns the payment, AUTHORIZED.
func (s refundStack) authorize(t *testing.T, order int64, external string) paymentclient.Payment {
	t.Helper()
	res, err := s.client.Authorize(context.Background(), paymentclient.NewIdempotencyKey(), paymentclient.ChargeRequest{
		OrderID: order, CustomerID: 42, Amount: "100.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: external})
	if err != nil || res.Payment.Status != "AUTHORIZED" || res.Payment.CaptureMethod != paymentclient.CaptureManual {
		t.Fatalf("authorize order %d: %+v, %v; want the payment AUTHORIZED", order, res, err)
	}
	return res.Payment
}

func capture(amount, external string) paymentclient.CaptureRequest {
	return paymentclient.CaptureRequest{Amount: amount, Currency: "RUB", ExternalCaptureID: external}
}

// Every answer the service gives a capture and a void, through the client,
// in the order a caller meets them: an authorization captured in part, the
// capture replayed, refunded in part; an authorization voided, the void
// replayed; and each refusal as the error to switch on. The provider
// captured and voided once each, whatever the client sent.
func TestCaptureAndVoidAnswersThroughTheRealService(t *testing.T) {
	t.Parallel()
	s := startRefundStack(t)
	ctx := context.Background()
	held := s.authorize(t, 1001, "pi_two_step_held")
	released := s.authorize(t, 1002, "pi_two_step_released")
	declinedHold := s.authorize(t, 1003, "pi_two_step_capture_declined")
	charged := s.charge(t, 1004, "pi_two_step_charged")
	capKey, voidKey := paymentclient.NewIdempotencyKey(), paymentclient.NewIdempotencyKey()

	steps := []struct {
		name      string
		paymentID int64
		key       string
		void      bool // a void; else a capture of req
		req       paymentclient.CaptureRequest
		is        error  // the error wanted; nil: the payment
		replayed  bool   // Idempotent-Replayed
		status    string // the payment's status, on the answer or in Problem.Payment
	}{
		{"above the authorization", held.ID, "k-over", false, capture("100.51", "cap_over"), paymentclient.ErrCaptureMismatch, false, ""},
		{"in another currency", held.ID, "k-eur", false, paymentclient.CaptureRequest{Amount: "10.00", Currency: "EUR", ExternalCaptureID: "cap_eur"}, paymentclient.ErrCaptureMismatch, false, ""},
		{"a partial capture", held.ID, capKey, false, capture("60.00", "cap_held"), nil, false, "SUCCEEDED"},
		{"its replay: the same answer, nothing captured again", held.ID, capKey, false, capture("60.00", "cap_held"), nil, true, "SUCCEEDED"},
		{"the same key for another capture", held.ID, capKey, false, capture("61.00", "cap_held"), paymentclient.ErrKeyReused, false, ""},
		{"a second capture of the captured payment", held.ID, "k-second", false, capture("10.00", "cap_second"), paymentclient.ErrPaymentNotAuthorized, false, ""},
		{"a void of the captured payment", held.ID, "k-void-captured", true, paymentclient.CaptureRequest{}, paymentclient.ErrPaymentNotAuthorized, false, ""},
		{"a void", released.ID, voidKey, true, paymentclient.CaptureRequest{}, nil, false, "VOIDED"},
		{"its replay", released.ID, voidKey, true, paymentclient.CaptureRequest{}, nil, true, "VOIDED"},
		{"a capture of the voided payment", released.ID, "k-capture-voided", false, capture("1.00", "cap_voided"), paymentclient.ErrPaymentNotAuthorized, false, ""},
		{"a capture of a one-step charge", charged.ID, "k-capture-charged", false, capture("1.00", "cap_charged"), paymentclient.ErrPaymentNotAuthorized, false, ""},
		{"a void of a one-step charge", charged.ID, "k-void-charged", true, paymentclient.CaptureRequest{}, paymentclient.ErrPaymentNotAuthorized, false, ""},
		{"declined by the provider: the hold stays", declinedHold.ID, "k-declined", false, capture("100.50", "decline_cap"), paymentclient.ErrCaptureDeclined, false, "AUTHORIZED"},
		{"refused by the provider for good", declinedHold.ID, "k-refused", false, capture("100.50", "refuse_cap"), paymentclient.ErrCaptureFailed, false, "AUTHORIZED"},
		{"no such payment", 999_999, "k-missing", false, capture("1.00", "cap_missing"), paymentclient.ErrPaymentNotFound, false, ""},
		{"an invalid amount", declinedHold.ID, "k-invalid", false, capture("-1", "cap_invalid"), paymentclient.ErrValidation, false, ""},
	}
	for _, st := range steps {
		var res paymentclient.Result
		var err error
		if st.void {
			res, err = s.client.Void(ctx, st.key, st.paymentID)
		} else {
			res, err = s.client.Capture(ctx, st.key, st.paymentID, st.req)
		}
		if st.is == nil {
			if err != nil || !res.Created || res.Replayed != st.replayed || res.Attempts != 1 ||
				res.Payment.ID != st.paymentID || res.Payment.Status != st.status || res.Payment.CaptureMethod != paymentclient.CaptureManual {
				t.Fatalf("%s: %+v, %v; want the payment %s, replayed %v, in one attempt", st.name, res, err, st.status, st.replayed)
			}
			if !st.void && res.Payment.CapturedAmount != st.req.Amount {
				t.Fatalf("%s: captured %q, want %s", st.name, res.Payment.CapturedAmount, st.req.Amount)
			}
			continue
		}
		var p *paymentclient.Problem
		if !errors.Is(err, st.is) || !errors.As(err, &p) || res != (paymentclient.Result{}) {
			t.Fatalf("%s: %+v, %v; want %v", st.name, res, err, st.is)
		}
		if st.status != "" && (p.Payment == nil || p.Payment.ID != st.paymentID || p.Payment.Status != st.status) {
			t.Fatalf("%s: the problem's payment is %+v, want payment %d %s", st.name, p.Payment, st.paymentID, st.status)
		}
	}

	// Refunds are of the captured money only: 60.00 of the 100.50.
	if _, err := s.client.Refund(ctx, "k-refund-over", held.ID, refund("60.01", "re_over")); !errors.Is(err, paymentclient.ErrRefundExceedsPayment) {
		t.Fatalf("a refund above the capture: %v; want ErrRefundExceedsPayment", err)
	}
	if r, err := s.client.Refund(ctx, "k-refund", held.ID, refund("20.00", "re_part")); err != nil || r.Refund.Status != "SUCCEEDED" {
		t.Fatalf("a refund of part of the capture: %+v, %v", r, err)
	}

	for ref, want := range map[string]struct {
		captures, voids int
		captured, net   string
	}{
		"pi_two_step_held":             {1, 0, "60", "40"},
		"pi_two_step_released":         {0, 1, "0", "0"},
		"pi_two_step_capture_declined": {0, 0, "0", "0"},
	} {
		net := s.svc.Provider.NetCaptured(ref)
		if len(net.Violations) > 0 || net.Authorizations != 1 || net.Captures != want.captures || net.Voids != want.voids ||
			net.Captured.String() != want.captured || net.Net.String() != want.net {
			t.Errorf("%s at the provider: %+v; want %d capture(s) of %s, %d void(s), %s kept", ref, net, want.captures, want.captured, want.voids, want.net)
		}
	}
	if got := s.svc.Count(t, `SELECT count(*) FROM payment WHERE id = $1 AND status = 'AUTHORIZED'`, declinedHold.ID); got != 1 {
		t.Errorf("the payment whose capture was declined: %d AUTHORIZED rows, want 1", got)
	}
}

// An authorization, a capture and a void whose answers are lost after the
// provider acted are retried by the client with the same key and body:
// the provider drops its answer to the service (drop_: the service
// answers 503 outcome-unknown, its retry asks the provider again under
// the same provider key), or a gateway drops the service's answer to the
// client (the retry replays the stored answer). The provider held,
// captured and voided once each.
func TestTwoStepCommandsWhoseAnswersAreLostAreRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	s := startRefundStack(t)
	ctx := context.Background()
	g := &gateway{fail: 1, status: 502}
	viaGateway := newFastClient(t, g.start(t, s.svc.URL))

	// A void sent without a reference meets the faults of its
	// authorization's: a drop_ authorization's void loses its first answer.
	authKey := paymentclient.NewIdempotencyKey()
	auth, err := s.client.Authorize(ctx, authKey, paymentclient.ChargeRequest{
		OrderID: 1001, CustomerID: 42, Amount: "100.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: "drop_auth"})
	if err != nil || auth.Attempts != 2 || auth.Replayed || auth.Payment.Status != "AUTHORIZED" {
		t.Fatalf("an authorization whose provider answer is lost: %+v, %v; want AUTHORIZED on attempt 2", auth, err)
	}
	voided, err := s.client.Void(ctx, paymentclient.NewIdempotencyKey(), auth.Payment.ID)
	if err != nil || voided.Attempts != 2 || voided.Replayed || voided.Payment.Status != "VOIDED" {
		t.Fatalf("a void whose provider answer is lost: %+v, %v; want VOIDED on attempt 2", voided, err)
	}
	if net := s.svc.Provider.NetCaptured("drop_auth"); net.Authorizations != 1 || net.Voids != 1 || len(net.Violations) > 0 {
		t.Errorf("drop_auth at the provider: %+v; want one authorization, voided once", net)
	}

	held := s.authorize(t, 1002, "pi_lost_capture")
	captured, err := s.client.Capture(ctx, paymentclient.NewIdempotencyKey(), held.ID, capture("100.50", "drop_cap"))
	if err != nil || captured.Attempts != 2 || captured.Replayed || captured.Payment.Status != "SUCCEEDED" || captured.Payment.CapturedAmount != "100.50" {
		t.Fatalf("a capture whose provider answer is lost: %+v, %v; want SUCCEEDED on attempt 2", captured, err)
	}
	if got := len(s.svc.Provider.Ledger().SucceededCaptures("drop_cap")); got != 1 {
		t.Errorf("captures drop_cap at the provider = %d, want 1", got)
	}

	held = s.authorize(t, 1003, "pi_gateway_capture")
	key := paymentclient.NewIdempotencyKey()
	captured, err = viaGateway.Capture(ctx, key, held.ID, capture("40.00", "cap_gw502"))
	if err != nil || captured.Attempts != 2 || !captured.Replayed || captured.Payment.Status != "SUCCEEDED" || captured.Payment.CapturedAmount != "40.00" {
		t.Fatalf("a capture whose answer a gateway lost: %+v, %v; want the stored answer replayed on attempt 2", captured, err)
	}
	if keys := g.forwarded(); len(keys) != 2 || keys[0] != key || keys[1] != key {
		t.Fatalf("the gateway forwarded keys %v; want %q twice", keys, key)
	}
	if got := len(s.svc.Provider.Ledger().SucceededCaptures("cap_gw502")); got != 1 {
		t.Errorf("captures cap_gw502 at the provider = %d, want 1", got)
	}
	if got := s.svc.Count(t, `SELECT count(*) FROM payment WHERE id = $1 AND status = 'SUCCEEDED' AND captured_amount = 40.00`, held.ID); got != 1 {
		t.Errorf("the captured payment's row: %d, want 1 SUCCEEDED with 40.00 captured", got)
	}
}

// A void that meets a capture whose outcome is unknown is told
// payment-transition-in-progress: it is retried after its Retry-After,
// and when the budget runs out the error says the other capture is still
// running and, unlike a lost answer, not that this void may have been made
// (nothing was stored or sent for its key). Once the capture is settled,
// by its retry with its key, the void is ErrPaymentNotAuthorized.
func TestAVoidMeetingACaptureInProgressIsRetriedThenRefused(t *testing.T) {
	t.Parallel()
	s := startRefundStack(t)
	ctx := context.Background()
	once, err := paymentclient.New(paymentclient.Config{BaseURL: s.svc.URL, APIKey: "demo-secret", Retry: paymentclient.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	held := s.authorize(t, 1001, "pi_capture_in_progress")
	capKey := paymentclient.NewIdempotencyKey()
	req := capture("100.50", "drop_cap_in_progress")
	_, err = once.Capture(ctx, capKey, held.ID, req)
	if !errors.Is(err, paymentclient.ErrOutcomeUnknown) {
		t.Fatalf("a capture whose answer is lost, not retried: %v; want ErrOutcomeUnknown", err)
	}

	twice, err := paymentclient.New(paymentclient.Config{BaseURL: s.svc.URL, APIKey: "demo-secret",
		Retry: paymentclient.RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxAttempts: 2}})
	if err != nil {
		t.Fatal(err)
	}
	voidKey := paymentclient.NewIdempotencyKey()
	_, err = twice.Void(ctx, voidKey, held.ID)
	var gaveUp *paymentclient.GaveUpError
	if !errors.As(err, &gaveUp) || gaveUp.Attempts != 2 || gaveUp.OutcomeUnknown || !errors.Is(err, paymentclient.ErrTransitionInProgress) {
		t.Fatalf("a void while a capture is unknown: %v; want two attempts, each payment-transition-in-progress, the outcome known", err)
	}

	if res, err := s.client.Capture(ctx, capKey, held.ID, req); err != nil || res.Payment.Status != "SUCCEEDED" {
		t.Fatalf("the capture's retry: %+v, %v; want SUCCEEDED", res, err)
	}
	if _, err := s.client.Void(ctx, voidKey, held.ID); !errors.Is(err, paymentclient.ErrPaymentNotAuthorized) {
		t.Fatalf("the void once the capture is settled: %v; want ErrPaymentNotAuthorized", err)
	}
	if net := s.svc.Provider.NetCaptured("pi_capture_in_progress"); net.Captures != 1 || net.Voids != 0 || len(net.Violations) > 0 {
		t.Errorf("at the provider: %+v; want one capture, no void", net)
	}
}
