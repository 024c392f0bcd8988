package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/shopspring/decimal"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
)

// The payment step of an order saga, end to end: commands on the commands
// topic, replies on the replies topic, money at the sandbox provider.

func TestSagaChargeThenCompensation(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "100.50")
	saga := uuid.New()
	r.send(t, chargeCmd(saga, "charge-payment", order, "100.50", "pi_saga_"+saga.String()))

	charged := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if charged.str("eventType") != "PaymentStepCharged.v1" || charged.str("amount") != "100.50" || charged.str("currency") != "RUB" {
		t.Fatalf("charge reply = %s", charged.Raw)
	}
	if charged.Key != saga.String() || charged.Headers["eventId"] != charged.str("eventId") || charged.Headers["eventType"] != "PaymentStepCharged.v1" {
		t.Fatalf("charge reply's key %q and headers %v do not name its saga, eventId and type", charged.Key, charged.Headers)
	}
	if got := r.net("pi_saga_" + saga.String()); !got.Equal(decimal.RequireFromString("100.50")) {
		t.Fatalf("the provider holds %s after the charge, want 100.50", got)
	}

	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "100.50" ||
		compensated.str("compensates") != "charge-payment" || compensated.Body["refundId"] == nil {
		t.Fatalf("compensation reply = %s", compensated.Raw)
	}
	if got := r.net("pi_saga_" + saga.String()); !got.IsZero() {
		t.Fatalf("the provider holds %s after the compensation, want 0", got)
	}
	// The saga's payments belong to its client, readable over HTTP.
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE client_id = 'saga' AND order_id = $1`, order); n != 1 {
		t.Fatalf("%d payments of the saga's client for the order, want 1", n)
	}
}

// A step delivered again, by the broker (the same eventId) or re-sent by
// the orchestrator (a new one), moves no money again, and is answered by
// its stored reply with the same eventId.
func TestSagaStepDeliveredAgainMovesNoMoneyAgain(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{Latency: 200 * time.Millisecond})
	order := r.newOrder(t, "10.00")
	saga := uuid.New()
	external := "pi_again_" + saga.String()
	cmd := chargeCmd(saga, "charge-payment", order, "10.00", external)
	// Five deliveries at once: the broker's redeliveries and a re-send.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if i == 4 {
				r.send(t, resent(cmd))
				return
			}
			r.send(t, cmd)
		})
	}
	wg.Wait()
	r.awaitReply(t, saga, "charge-payment", 1)
	r.quietFor(t, time.Second, saga, "charge-payment", 5)

	r.send(t, resent(cmd)) // after the outcome: answered by the stored reply
	replies := r.awaitReply(t, saga, "charge-payment", 2)
	if ids := eventIDs(replies); len(ids) != 1 {
		t.Fatalf("%d replies with %d eventIds, want one eventId: %s", len(replies), len(ids), r.dump())
	}
	if n := r.succeededCharges(external); n != 1 {
		t.Fatalf("the provider charged the step %d times, want once", n)
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE external_payment_id = $1`, external); n != 1 {
		t.Fatalf("%d payments for the step, want 1", n)
	}
}

// The same (sagaId, stepName) with another command moves nothing and is
// answered rejected, before any other check.
func TestSagaStepReusedForAnotherCommandIsRejected(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "20.00")
	saga := uuid.New()
	r.send(t, chargeCmd(saga, "charge-payment", order, "20.00", "pi_reuse_"+saga.String()))
	r.awaitReply(t, saga, "charge-payment", 1)

	tests := []struct {
		name string
		cmd  map[string]any
	}{
		{"another amount", chargeCmd(saga, "charge-payment", order, "25.00", "pi_reuse_"+saga.String())},
		{"another external id", chargeCmd(saga, "charge-payment", order, "20.00", "pi_other_"+saga.String())},
		{"an unknown order", chargeCmd(saga, "charge-payment", 999999999, "20.00", "pi_reuse_"+saga.String())},
		{"a compensation", compensateCmd(saga, "charge-payment", "charge-payment")},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.send(t, tc.cmd)
			replies := r.awaitReply(t, saga, "charge-payment", 2+i)
			last := replies[len(replies)-1]
			if last.str("eventType") != "PaymentStepRejected.v1" || last.str("code") != "step-reused" {
				t.Fatalf("reply = %s", last.Raw)
			}
		})
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE order_id = $1`, order); n != 1 {
		t.Fatalf("%d payments for the order, want 1", n)
	}
	if got := r.net("pi_reuse_" + saga.String()); !got.Equal(decimal.RequireFromString("20.00")) {
		t.Fatalf("the provider holds %s, want 20.00", got)
	}
}

// A compensation before its step leaves a tombstone: compensated with
// zero, and the late step moves no money and is answered cancelled.
func TestSagaCompensationBeforeItsStep(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "30.00")
	saga := uuid.New()
	external := "pi_late_" + saga.String()
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "0" || compensated.Body["currency"] != nil {
		t.Fatalf("compensation reply = %s", compensated.Raw)
	}

	step := chargeCmd(saga, "charge-payment", order, "30.00", external)
	r.send(t, step)
	cancelled := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if cancelled.str("eventType") != "PaymentStepCancelled.v1" || cancelled.str("compensatedBy") != "refund-payment" {
		t.Fatalf("late step's reply = %s", cancelled.Raw)
	}
	r.send(t, resent(step))
	if ids := eventIDs(r.awaitReply(t, saga, "charge-payment", 2)); len(ids) != 1 {
		t.Fatalf("the re-sent late step got a new reply: %s", r.dump())
	}
	r.send(t, resent(compensateCmd(saga, "refund-payment", "charge-payment")))
	if ids := eventIDs(r.awaitReply(t, saga, "refund-payment", 2)); len(ids) != 1 {
		t.Fatalf("the re-sent compensation got a new reply: %s", r.dump())
	}
	if n := len(r.svc.Provider.ChargesFor(external)); n != 0 {
		t.Fatalf("the provider was asked to charge a cancelled step %d times", n)
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE order_id = $1`, order); n != 0 {
		t.Fatalf("%d payments for a cancelled step, want 0", n)
	}
}

// A compensation after a step that charged nothing is compensated with
// zero.
func TestSagaCompensationAfterADeclinedStep(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "40.00")
	saga := uuid.New()
	r.send(t, chargeCmd(saga, "charge-payment", order, "40.00", sandboxprovider.DeclinePrefix+saga.String()))
	if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepDeclined.v1" {
		t.Fatalf("reply = %s", got.Raw)
	}
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	if got := r.awaitReply(t, saga, "refund-payment", 1)[0]; got.str("eventType") != "PaymentStepCompensated.v1" || got.str("amount") != "0" {
		t.Fatalf("compensation reply = %s", got.Raw)
	}
	if n := len(r.svc.Provider.RefundsFor(sandboxprovider.DeclinePrefix + saga.String())); n != 0 {
		t.Fatalf("%d refunds of a declined charge", n)
	}
}

// A compensation while its step's outcome is unknown waits for the step to
// settle, and then refunds what it charged: never compensated while a
// charge may stand. The step's reply comes once it is settled, from the
// completer.
func TestSagaCompensationWhileItsStepIsUnknown(t *testing.T) {
	// The provider takes 2s over the charge, the call gives up after
	// 300ms, and its lookup says the charge is still being processed: the
	// outcome is unknown until the completer takes the step over, once its
	// 3s lock has run out.
	r := startSaga(t, map[string]string{"PROVIDER_TIMEOUT": "300ms", "IDEMPOTENCY_LOCK_TIMEOUT": "3s"},
		sandboxprovider.Config{Latency: 2 * time.Second})
	order := r.newOrder(t, "50.00")
	saga := uuid.New()
	external := "pi_unknown_" + saga.String()
	r.send(t, chargeCmd(saga, "charge-payment", order, "50.00", external))
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	r.waitFor(t, "the compensation waiting for its step", func() bool {
		return r.svc.Count(t, `SELECT count(*) FROM saga_step WHERE saga_id = $1 AND step_name = 'refund-payment' AND waiting`, saga) == 1
	})
	if got := r.repliesTo(saga, "charge-payment"); len(got) != 0 {
		t.Fatalf("the step was answered while its outcome was unknown: %s", r.dump())
	}

	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "50.00" {
		t.Fatalf("compensation reply = %s", compensated.Raw)
	}
	charged := r.repliesTo(saga, "charge-payment")
	if len(charged) != 1 || charged[0].str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("the step's replies once settled: %s", r.dump())
	}
	if got := r.net(external); !got.IsZero() {
		t.Fatalf("the provider holds %s after the compensation, want 0", got)
	}
	r.quietFor(t, time.Second, saga, "charge-payment", 1)
	r.quietFor(t, 0, saga, "refund-payment", 1)
}

// A compensation refunds what its step charged less what was refunded
// before (over HTTP, say), and so never more than the step charged.
func TestSagaCompensationRefundsWhatIsLeft(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "60.00")
	saga := uuid.New()
	external := "pi_partial_" + saga.String()
	r.send(t, chargeCmd(saga, "charge-payment", order, "60.00", external))
	charged := r.awaitReply(t, saga, "charge-payment", 1)[0]
	payment := int64(charged.Body["paymentId"].(float64))

	status, body := postJSON(t, r.svc.URL+fmt.Sprintf("/payments/%d/refunds", payment), "saga-secret", "partial-"+saga.String(), `{"amount":"15.00","externalRefundId":"re_partial"}`)
	if status != 201 {
		t.Fatalf("partial refund over HTTP: %d %s", status, body)
	}
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("amount") != "45.00" {
		t.Fatalf("compensation reply = %s, want 45.00 given back", compensated.Raw)
	}
	if got := r.net(external); !got.IsZero() {
		t.Fatalf("the provider holds %s, want 0", got)
	}
}

// A step for an order the projection does not hold yet is tried again
// until the order arrives; one whose order never comes fails
// order-not-found after SAGA_ORDER_WAIT, stored and replied once.
func TestSagaStepWaitsForItsOrder(t *testing.T) {
	r := startSaga(t, map[string]string{"SAGA_ORDER_WAIT": "2s"}, sandboxprovider.Config{})
	late, never := int64(880001)+orderIDs.Add(1), int64(890001)+orderIDs.Add(1)
	sagaLate, sagaNever := uuid.New(), uuid.New()
	r.send(t, chargeCmd(sagaLate, "charge-payment", late, "70.00", "pi_wait_"+sagaLate.String()))
	time.Sleep(500 * time.Millisecond)
	r.projectOrder(t, late, "70.00")
	if got := r.awaitReply(t, sagaLate, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("reply once the order came = %s", got.Raw)
	}

	cmd := chargeCmd(sagaNever, "charge-payment", never, "70.00", "pi_never_"+sagaNever.String())
	r.send(t, cmd)
	failed := r.awaitReply(t, sagaNever, "charge-payment", 1)[0]
	if failed.str("eventType") != "PaymentStepFailed.v1" || failed.str("code") != "order-not-found" {
		t.Fatalf("reply = %s", failed.Raw)
	}
	r.send(t, resent(cmd))
	if ids := eventIDs(r.awaitReply(t, sagaNever, "charge-payment", 2)); len(ids) != 1 {
		t.Fatalf("the failure was not stored once: %s", r.dump())
	}
	// The customer, amount and currency must match the projected order.
	sagaMismatch := uuid.New()
	order := r.newOrder(t, "70.00")
	r.send(t, chargeCmd(sagaMismatch, "charge-payment", order, "71.00", "pi_mismatch_"+sagaMismatch.String()))
	if got := r.awaitReply(t, sagaMismatch, "charge-payment", 1)[0]; got.str("code") != "order-mismatch" {
		t.Fatalf("reply = %s", got.Raw)
	}
}

// One paid order is paid once across transports: a saga step for an order
// an HTTP charge paid is answered failed, and charges nothing.
func TestSagaStepForAnOrderPaidOverHTTP(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "80.00")
	status, body := postJSON(t, r.svc.URL+"/payments", apiKey, "http-"+uuid.NewString(),
		fmt.Sprintf(`{"orderId":%d,"customerId":42,"amount":"80.00","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_http_%d"}`, order, order))
	if status != 201 {
		t.Fatalf("HTTP charge: %d %s", status, body)
	}
	saga := uuid.New()
	r.send(t, chargeCmd(saga, "charge-payment", order, "80.00", "pi_saga_paid_"+saga.String()))
	if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepFailed.v1" || got.str("code") != "order-already-paid" {
		t.Fatalf("reply = %s", got.Raw)
	}
	if n := len(r.svc.Provider.ChargesFor("pi_saga_paid_" + saga.String())); n != 0 {
		t.Fatalf("the provider was asked to charge a paid order again (%d)", n)
	}
}

// A command that cannot be read goes to the dead-letter topic with the
// reason in a header, moves no money, and does not block its partition;
// one whose step can be named is answered failed too, once.
func TestSagaCommandsThatCannotBeRead(t *testing.T) {
	r := startSaga(t, nil, sandboxprovider.Config{})
	order := r.newOrder(t, "90.00")
	saga := uuid.New()
	unknownType := chargeCmd(saga, "bad-type", order, "90.00", "pi_bad_"+saga.String())
	unknownType["eventType"] = "ChargeOrder.v9"
	badAmount := chargeCmd(saga, "bad-amount", order, "90.001.0", "pi_bad2_"+saga.String())
	numberAmount := chargeCmd(saga, "number-amount", order, "90.00", "pi_bad3_"+saga.String())
	numberAmount["amount"] = 90
	noStep := chargeCmd(saga, "", order, "90.00", "pi_bad4_"+saga.String())
	key := []byte(saga.String())
	r.sendRaw(t, kafka.Message{Key: key, Value: []byte(`{not json`)})
	r.sendInvalid(t, unknownType, badAmount, numberAmount, noStep)
	r.send(t, chargeCmd(saga, "charge-payment", order, "90.00", "pi_good_"+saga.String()))

	if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("the valid command after the bad ones: %s", got.Raw)
	}
	for _, step := range []string{"bad-type", "bad-amount", "number-amount"} {
		got := r.awaitReply(t, saga, step, 1)
		if len(got) != 1 || got[0].str("eventType") != "PaymentStepFailed.v1" || got[0].str("code") != "invalid-command" {
			t.Fatalf("step %s: replies %s", step, r.dump())
		}
	}
	dead := kafkatest.ReadAll(t, r.brokers, r.dlt, 10*time.Second)
	asyncapitest.ValidateRecords(t, "paymentCommandsDLT", dead)
	reasons := map[string]int{}
	for _, rec := range dead {
		for _, h := range rec.Headers {
			if h.Key == "x-dlt-error-code" {
				reasons[string(h.Value)]++
			}
		}
	}
	want := map[string]int{"invalid-json": 1, "unknown-event-type": 1, "invalid-amount": 2, "invalid-field": 1}
	for reason, n := range want {
		if reasons[reason] != n {
			t.Fatalf("dead-lettered by reason %v, want %v", reasons, want)
		}
	}
	if n := r.svc.Count(t, `SELECT count(*) FROM payment WHERE order_id = $1`, order); n != 1 {
		t.Fatalf("%d payments for the order, want only the valid step's", n)
	}
}

// A step is one trace, continued from its command's traceparent: the
// command's processing span, the charge's phases and provider call under
// it, and the reply carries the same trace in its headers.
func TestSagaStepIsOneTraceIntoItsReply(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	r := startSaga(t, nil, sandboxprovider.Config{}, service.WithTracerProvider(provider))
	order := r.newOrder(t, "12.00")
	saga := uuid.New()

	orchestrator := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID(uuid.New()), SpanID: trace.SpanID{8, 7, 6, 5, 4, 3, 2, 1}, TraceFlags: trace.FlagsSampled,
	})
	traceparent := "00-" + orchestrator.TraceID().String() + "-" + orchestrator.SpanID().String() + "-01"
	r.sendRaw(t, r.withHeader(t, chargeCmd(saga, "charge-payment", order, "12.00", "pi_traced_"+saga.String()), "traceparent", traceparent))

	got := r.awaitReply(t, saga, "charge-payment", 1)[0]
	if parts := strings.Split(got.Headers["traceparent"], "-"); len(parts) != 4 || parts[1] != orchestrator.TraceID().String() {
		t.Fatalf("reply headers %v: want the command's trace %s", got.Headers, orchestrator.TraceID())
	}
	var process, call *tracetest.SpanStub
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		process, call = nil, nil
		spans := exporter.GetSpans()
		for i, sp := range spans {
			if sp.SpanContext.TraceID() != orchestrator.TraceID() {
				continue
			}
			switch sp.Name {
			case "process " + r.commands:
				process = &spans[i]
			case "provider charge":
				call = &spans[i]
			}
		}
		if process != nil && call != nil {
			break
		}
	}
	if process == nil || call == nil {
		t.Fatalf("the command's trace lacks its processing span (%v) or its provider call (%v)", process != nil, call != nil)
	}
	if process.Parent.SpanID() != orchestrator.SpanID() || process.SpanKind != trace.SpanKindConsumer {
		t.Fatalf("processing span: parent %v, kind %v; want a consumer span under the orchestrator's", process.Parent, process.SpanKind)
	}
}

// A step that waits (here for its order) holds up its own saga and the
// commits, not the other sagas: a command fetched after it is answered
// meanwhile, and no offset passes the waiting command until it is
// answered.
func TestSagaStepWaitingHoldsUpOnlyItsSagaAndTheCommits(t *testing.T) {
	r := startSaga(t, map[string]string{"SAGA_ORDER_WAIT": "30s"}, sandboxprovider.Config{})
	other := r.newOrder(t, "15.00")
	late := int64(910001) + orderIDs.Add(1)
	waiting, quick := uuid.New(), uuid.New()
	r.send(t, chargeCmd(waiting, "charge-payment", late, "15.00", "pi_waiting_"+waiting.String()))
	// The waiting step's batch is fetched and carried out before the next.
	r.waitFor(t, "the waiting step started", func() bool { return r.retried(t) > 0 })
	r.send(t, chargeCmd(quick, "charge-payment", other, "15.00", "pi_quick_"+quick.String()))
	if got := r.awaitReply(t, quick, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("reply to the step fetched after the waiting one = %s", got.Raw)
	}
	if got := r.repliesTo(waiting, "charge-payment"); len(got) != 0 {
		t.Fatalf("the waiting step is answered already: %s", r.dump())
	}
	cmds := kafkatest.ReadAll(t, r.brokers, r.commands, 10*time.Second)
	var rec kafkatest.Record
	for _, c := range cmds {
		if string(c.Key) == waiting.String() {
			rec = c
		}
	}
	if committed := r.committed(t, rec.Partition); committed > rec.Offset {
		t.Fatalf("partition %d is committed to %d, past the waiting command at %d", rec.Partition, committed, rec.Offset)
	}

	r.projectOrder(t, late, "15.00")
	if got := r.awaitReply(t, waiting, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("reply once the order came = %s", got.Raw)
	}
	r.waitFor(t, "the waiting command committed", func() bool { return r.committed(t, rec.Partition) > rec.Offset })
}

// A saga's commands in different batches are carried out in offset order:
// a compensation fetched while its step still waits for its order comes
// after the step, and refunds it, instead of cancelling it.
func TestSagaCommandsOfOneSagaInLaterBatchesWaitForItsEarlierOnes(t *testing.T) {
	r := startSaga(t, map[string]string{"SAGA_ORDER_WAIT": "30s"}, sandboxprovider.Config{})
	late := int64(920001) + orderIDs.Add(1)
	saga := uuid.New()
	external := "pi_ordered_" + saga.String()
	r.send(t, chargeCmd(saga, "charge-payment", late, "25.00", external))
	r.waitFor(t, "the step started", func() bool { return r.retried(t) > 0 })
	r.send(t, compensateCmd(saga, "refund-payment", "charge-payment"))
	r.quietFor(t, time.Second, saga, "refund-payment", 0)
	r.projectOrder(t, late, "25.00")
	if got := r.awaitReply(t, saga, "charge-payment", 1)[0]; got.str("eventType") != "PaymentStepCharged.v1" {
		t.Fatalf("step's reply = %s", got.Raw)
	}
	compensated := r.awaitReply(t, saga, "refund-payment", 1)[0]
	if compensated.str("eventType") != "PaymentStepCompensated.v1" || compensated.str("amount") != "25.00" {
		t.Fatalf("compensation reply = %s", compensated.Raw)
	}
	if got := r.net(external); !got.IsZero() {
		t.Fatalf("the provider holds %s after the compensation, want 0", got)
	}
}
