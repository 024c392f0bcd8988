package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// A saga step with captureMethod manual authorizes; its compensation
// releases the hold with a void while it is uncaptured, and refunds what a
// capture took once it is captured (decision 0029).

// manualChargeCmd is chargeCmd authorizing instead of charging.
func manualChargeCmd(saga uuid.UUID, step string, order int64, amount, external string) map[string]any {
	cmd := chargeCmd(saga, step, order, amount, external)
	cmd["captureMethod"] = "manual"
	return cmd
}

// authorization is the provider's one succeeded authorization of a
// reference.
func (r *sagaRig) authorization(t *testing.T, reference string) sandboxprovider.Authorization {
	t.Helper()
	var got []sandboxprovider.Authorization
	for _, a := range r.svc.Provider.AuthorizationsFor(reference) {
		if a.Status == sandboxprovider.StatusSucceeded {
			got = append(got, a)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d succeeded authorizations of %s, want 1", len(got), reference)
	}
	return got[0]
}

func TestSagaAuthorizedStepCompensatedIsVoided(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "25.00")
	saga := uuid.New()
	external := "pi_hold_" + saga.String()
	r.send(t, manualChargeCmd(saga, "charge-payment", order, "25.00", external))

	authorized := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if authorized.str("eventType") != "PaymentStepAuthorized.v1" || authorized.str("amount") != "25.00" || authorized.str("currency") != "RUB" ||
		authorized.Body["paymentId"] == nil || authorized.Body["orderId"] != float64(order) {
		t.Fatalf("authorize reply = %s", authorized.Raw)
	}
	payment := int64(authorized.Body["paymentId"].(float64))
	if n := len(r.svc.Provider.ChargesFor(external)); n != 0 {
		t.Fatalf("the provider was asked to charge an authorizing step %d times", n)
	}
	hold := r.authorization(t, external)
	if hold.Hold != sandboxprovider.HoldActive || !hold.Amount.Equal(decimal.RequireFromString("25.00")) {
		t.Fatalf("the provider's hold after the step: %+v", hold)
	}

	compensation := compensateCmd(saga, "release-payment", "charge-payment")
	r.send(t, compensation)
	released := r.awaitReply(t, saga, "release-payment", 1)[0]
	if released.str("eventType") != "PaymentStepCompensated.v1" || released.str("amount") != "0" || released.Body["voided"] != true ||
		released.str("compensates") != "charge-payment" || released.Body["currency"] != nil || released.Body["refundId"] != nil ||
		released.Body["paymentId"] != float64(payment) {
		t.Fatalf("compensation reply = %s", released.Raw)
	}
	voids := r.svc.Provider.VoidsFor(hold.IdempotencyKey)
	if len(voids) != 1 || voids[0].Status != sandboxprovider.StatusSucceeded {
		t.Fatalf("the provider's voids of the hold: %+v, want one succeeded", voids)
	}
	if got := r.authorization(t, external); got.Hold != sandboxprovider.HoldVoided {
		t.Fatalf("the provider's hold after the compensation is %s, want voided", got.Hold)
	}
	if n := len(r.svc.Provider.RefundsFor(external)); n != 0 {
		t.Fatalf("%d refunds of a hold that was never captured", n)
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE id = $1 AND status = 'VOIDED'`, payment); n != 1 {
		t.Fatal("the payment is not VOIDED after its step's compensation")
	}
	// The compensation's answer is stored once: the void is recorded with
	// its reply, and a re-sent compensation gets that reply again.
	r.send(t, resent(compensation))
	if ids := eventIDs(r.awaitReply(t, saga, "release-payment", 2)); len(ids) != 1 {
		t.Fatalf("the re-sent compensation got a new reply: %s", r.dump())
	}
	if n := len(r.svc.Provider.VoidsFor(hold.IdempotencyKey)); n != 1 {
		t.Fatalf("the re-sent compensation voided again: %d voids", n)
	}
	// The order is free: another payment of it is taken.
	status, body := postJSON(t, r.svc.URL+"/payments", apiKey, "after-void-"+saga.String(),
		fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":"25.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_after_%s"}`, order, saga))
	if status != 201 {
		t.Fatalf("a new charge of the order whose hold was voided: %d %s", status, body)
	}
	r.quietFor(t, 500*time.Millisecond, saga, "charge-payment", 1)
}

// An authorized step captured over HTTP (with the saga's API key) before
// its compensation: the compensation refunds what the capture took, not
// the authorized amount, and voids nothing.
func TestSagaAuthorizedStepCapturedThenCompensatedIsRefunded(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "40.00")
	saga := uuid.New()
	external := "pi_captured_" + saga.String()
	r.send(t, manualChargeCmd(saga, "charge-payment", order, "40.00", external))
	authorized := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if authorized.str("eventType") != "PaymentStepAuthorized.v1" {
		t.Fatalf("authorize reply = %s", authorized.Raw)
	}
	payment := int64(authorized.Body["paymentId"].(float64))

	status, body := postJSON(t, r.svc.URL+fmt.Sprintf("/payments/%d/captures", payment), "saga-secret", "capture-"+saga.String(),
		`{"amount":"30.00","currency":"RUB","externalCaptureId":"cap_saga"}`)
	if status != 201 {
		t.Fatalf("partial capture over HTTP: %d %s", status, body)
	}
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "30.00" || compensated.str("currency") != "RUB" ||
		compensated.Body["refundId"] == nil || compensated.Body["voided"] != nil {
		t.Fatalf("compensation reply = %s, want the 30.00 captured refunded", compensated.Raw)
	}
	net := r.svc.Provider.NetCaptured(external)
	if !net.Captured.Equal(decimal.RequireFromString("30.00")) || !net.Refunded.Equal(net.Captured) || !net.Net.IsZero() || len(net.Violations) != 0 {
		t.Fatalf("the provider's ledger of the payment: %+v, want 30.00 captured and refunded", net)
	}
	if n := len(r.svc.Provider.VoidsFor(r.authorization(t, external).IdempotencyKey)); n != 0 {
		t.Fatalf("%d voids of a captured hold", n)
	}
}

// A compensation before an authorizing step leaves a tombstone: the step
// is cancelled and never authorizes.
func TestSagaCompensationBeforeAnAuthorizingStep(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "35.00")
	saga := uuid.New()
	external := "pi_late_hold_" + saga.String()
	r.send(t, compensateCmd(saga, "release-payment", "charge-payment"))
	compensated := r.awaitReply(t, saga, "release-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "0" || compensated.Body["voided"] != nil {
		t.Fatalf("compensation reply = %s", compensated.Raw)
	}
	step := manualChargeCmd(saga, "charge-payment", order, "35.00", external)
	r.send(t, step)
	cancelled := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if cancelled.str("eventType") != "PaymentStepCancelled.v1" || cancelled.str("compensatedBy") != "release-payment" {
		t.Fatalf("late step's reply = %s", cancelled.Raw)
	}
	r.send(t, resent(step))
	if ids := eventIDs(r.awaitReply(t, saga, "charge-payment", 2)); len(ids) != 1 {
		t.Fatalf("the re-sent late step got a new reply: %s", r.dump())
	}
	if n := len(r.svc.Provider.AuthorizationsFor(external)); n != 0 {
		t.Fatalf("the provider was asked to authorize a cancelled step %d times", n)
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE order_id = $1`, order); n != 0 {
		t.Fatalf("%d payments for a cancelled step, want 0", n)
	}
}

// A compensation whose void's outcome is unknown (the provider answers
// after the call gave up) is pending: no reply until the void is settled,
// then one, from the completer, with the void recorded once.
func TestSagaCompensationWhileItsVoidIsUnknown(t *testing.T) {
	// The provider takes 2s over every request and the call gives up after
	// 300ms: the authorization and then the void are unknown until the
	// completer takes each over, once its 3s lock has run out.
	r := startSaga(t, map[string]string{"PROVIDER_TIMEOUT": "300ms", "IDEMPOTENCY_LOCK_TIMEOUT": "3s"},
		sandboxprovider.Config{Latency: 2 * time.Second})
	order := r.newOrder(t, "45.00")
	saga := uuid.New()
	external := "pi_unknown_void_" + saga.String()
	r.send(t, manualChargeCmd(saga, "charge-payment", order, "45.00", external))
	if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepAuthorized.v1" {
		t.Fatalf("authorize reply = %s", got.Raw)
	}

	compensation := compensateCmd(saga, "release-payment", "charge-payment")
	r.send(t, compensation)
	r.waitFor(t, "the compensation's void claimed, its outcome unknown", func() bool {
		return r.svc.Count(t, `SELECT count(*) FROM idempotency_record WHERE command = 'void' AND status = 'IN_PROGRESS'
			AND idempotency_key LIKE '%' || $1 || ':release-payment%'`, saga.String()) == 1
	})
	r.read(t)
	if got := r.repliesTo(saga, "release-payment"); len(got) != 0 {
		t.Fatalf("the compensation was answered while its void was unknown: %s", r.dump())
	}

	released := r.awaitReply(t, saga, "release-payment", 1)[0]
	if released.str("eventType") != "PaymentStepCompensated.v1" || released.str("amount") != "0" || released.Body["voided"] != true {
		t.Fatalf("compensation reply once the void settled = %s", released.Raw)
	}
	hold := r.authorization(t, external)
	if voids := r.svc.Provider.VoidsFor(hold.IdempotencyKey); len(voids) != 1 || voids[0].Status != sandboxprovider.StatusSucceeded || hold.Hold != sandboxprovider.HoldVoided {
		t.Fatalf("the provider's hold %s and voids %+v, want one succeeded void", hold.Hold, voids)
	}
	r.quietFor(t, time.Second, saga, "release-payment", 1)
	r.send(t, resent(compensation))
	if ids := eventIDs(r.awaitReply(t, saga, "release-payment", 2)); len(ids) != 1 {
		t.Fatalf("the re-sent compensation got a new reply: %s", r.dump())
	}
}

// sagaWebhookSecret signs the sandbox's events to the saga's service.
const sagaWebhookSecret = "whsec_saga_received_0123456789" //nolint:gosec // G101: the test's own secret

// A compensation whose void the provider received and decides later (its
// received mode): no reply while the void awaits the provider, whatever
// the completer does meanwhile; once the provider decides, its event
// settles the void and publishes the compensation's reply with it, once;
// when the event is lost, the completer's retry of the void finds the
// decision by the provider's lookup, and replies.
func TestSagaCompensationsReceivedVoidRepliesWithItsSettlement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string // the authorization's reference's, which its void inherits
	}{
		{"the event delivered", "pi_"},
		{"the event lost", "hooklost_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startSaga(t, nil, sandboxprovider.Config{Modifications: sandboxprovider.ModificationsReceived, ModificationDelay: time.Hour,
				Webhooks: sandboxprovider.WebhookConfig{Secret: sagaWebhookSecret, FirstRetry: 20 * time.Millisecond, RetryFor: time.Minute}})
			order := r.newOrder(t, "35.00")
			saga := uuid.New()
			external := tc.prefix + "received_void_" + saga.String()
			r.send(t, manualChargeCmd(saga, "charge-payment", order, "35.00", external))
			if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepAuthorized.v1" {
				t.Fatalf("authorize reply = %s", got.Raw)
			}
			compensation := compensateCmd(saga, "release-payment", "charge-payment")
			r.send(t, compensation)
			r.waitFor(t, "the provider received the compensation's void", func() bool { return r.svc.Provider.Undecided() == 1 })
			// The completer runs every second: two runs, and still no reply.
			r.quietFor(t, 2*time.Second, saga, "release-payment", 0)
			if n := r.svc.Count(t, `SELECT count(*) FROM payment_transition WHERE status = 'PENDING' AND kind = 'void'`); n != 1 {
				t.Fatalf("%d PENDING voids while the provider decides, want 1", n)
			}
			r.svc.Provider.DecideReceived()
			released := r.awaitReply(t, saga, "release-payment", 1)[0]
			if released.str("eventType") != "PaymentStepCompensated.v1" || released.str("amount") != "0" || released.Body["voided"] != true {
				t.Fatalf("compensation reply once the void settled = %s", released.Raw)
			}
			hold := r.authorization(t, external)
			if voids := r.svc.Provider.VoidsFor(hold.IdempotencyKey); len(voids) != 1 || voids[0].Status != sandboxprovider.StatusSucceeded {
				t.Fatalf("the provider's voids %+v, want one succeeded", voids)
			}
			r.quietFor(t, time.Second, saga, "release-payment", 1)
		})
	}
}
