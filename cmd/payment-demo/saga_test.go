package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// demoTopics creates the demo's topics on brokers, each named for the test
// (a shared external broker keeps the tests apart).
func demoTopics(t *testing.T, brokers []string) topics {
	t.Helper()
	return topics{
		orders:   kafkatest.CreateTopic(t, brokers, 1),
		events:   kafkatest.CreateTopic(t, brokers, 1),
		commands: kafkatest.CreateTopic(t, brokers, 3),
		replies:  kafkatest.CreateTopic(t, brokers, 3),
	}
}

// The demo's saga against the real service, its saga consumer and outbox
// relay on a broker (the in-process one unless KAFKA_BROKERS names one),
// with each provider: the charge step is answered PaymentStepCharged.v1
// (through Stripe PaymentStepFailed.v1: a ChargeOrder.v1 carries no
// payment method), the step's payment is read by the saga's client, the
// compensation is answered PaymentStepCompensated.v1 (of nothing through
// Stripe), and the re-sent charge step gets the stored reply with the
// same eventId; the demo fails if any reply does not come. The sandbox
// charged once, asked once, and refunded the whole charge; Stripe holds
// nothing; every command the demo sent and every reply it read is held to
// the contract (api/asyncapi.yaml).
func TestDemoSagaIsAnsweredOnTheRepliesTopic(t *testing.T) {
	t.Parallel()
	for _, name := range []string{providerSandbox, providerStripe} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			demoSaga(t, name)
		})
	}
}

func demoSaga(t *testing.T, name string) {
	brokers := kafkatest.Brokers(t)
	tp := demoTopics(t, brokers)
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s" // a real broker's least session timeout
	}
	o := servicetest.Options{DSN: testdb.New(t), Env: map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"ORDER_EVENTS_TOPIC":                tp.orders,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_EVENTS_TOPIC":              tp.events,
		"PAYMENT_COMMANDS_TOPIC":            tp.commands,
		"PAYMENT_COMMANDS_DLT_TOPIC":        kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_REPLIES_TOPIC":             tp.replies,
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
		"OUTBOX_POLL_INTERVAL":              "200ms",
		// The saga's client's key, as make dev and compose give it.
		"API_KEYS": servicetest.BaseEnv["API_KEYS"] + ",saga:saga-secret",
	}}
	if name == providerStripe {
		o.Stripe = &servicetest.StripeOptions{}
	}
	svc := servicetest.Start(t, o)
	providerURL := providerOf(svc)
	d, err := newDemo(svc.URL, "demo-secret", providerURL, brokers)
	if err != nil {
		t.Fatal(err)
	}
	d.topics = tp
	d.prov = provider{name: name, url: providerURL, key: servicetest.StripeSecretKey}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const order = 4001
	if err := d.saga(ctx, order); err != nil {
		t.Fatalf("the saga steps: %v", err)
	}

	wantCharge := replyCharged
	if name == providerStripe {
		wantCharge = replyFailed
		if n := svc.Stripe.PaymentIntents(); n != 0 {
			t.Errorf("Stripe holds %d PaymentIntents; want none (the step has no payment method)", n)
		}
	} else {
		ledger := svc.Provider.Ledger()
		if charges := ledger.Succeeded("pi_demo_saga_4001"); len(charges) != 1 || charges[0].Requests != 1 {
			t.Errorf("the provider's charges: %+v; want one, asked for once (the re-sent step answered from the record)", charges)
		}
		if refunds, total := ledger.Refunded("pi_demo_saga_4001"); len(refunds) != 1 || total.StringFixed(2) != "100.50" {
			t.Errorf("the provider refunded %v (%s); want one refund of the whole 100.50", refunds, total)
		}
	}
	if n := svc.Count(t, `SELECT count(*) FROM payment WHERE client_id = 'saga' AND order_id = $1`, order); n != 1 {
		t.Errorf("%d payments of the saga's client for order %d, want 1", n, order)
	}

	commands := kafkatest.ReadAll(t, brokers, tp.commands, 10*time.Second)
	asyncapitest.ValidateRecords(t, "paymentCommands", commands)
	if len(commands) != 3 {
		t.Errorf("%d commands sent, want 3: the charge, its compensation, the charge again", len(commands))
	}
	replies := kafkatest.ReadAll(t, brokers, tp.replies, 10*time.Second)
	asyncapitest.ValidateRecords(t, "paymentReplies", replies)
	// One saga, one partition: its replies in the order of its commands.
	// The re-sent charge step is answered by the stored reply, with the
	// first one's eventId. A command the broker delivers again (a
	// rebalance under load) is answered so once more: the replies' eventIds
	// are the charge's and the compensation's, in that order, and the
	// charge's comes again after the compensation's.
	type reply struct{ id, typ string }
	var got, distinct []reply
	seen := map[string]bool{}
	for _, r := range replies {
		var rp reply
		for _, h := range r.Headers {
			switch h.Key {
			case "eventId":
				rp.id = string(h.Value)
			case "eventType":
				rp.typ = string(h.Value)
			}
		}
		got = append(got, rp)
		if !seen[rp.id] {
			seen[rp.id] = true
			distinct = append(distinct, rp)
		}
	}
	if len(distinct) != 2 || distinct[0].typ != wantCharge || distinct[1].typ != replyCompensated {
		t.Fatalf("replies %v, want %s, then %s, then the first again", got, wantCharge, replyCompensated)
	}
	compensated := slices.Index(got, distinct[1])
	if again := slices.Index(got[compensated:], distinct[0]); again < 0 {
		t.Errorf("replies %v: the re-sent charge step's reply (eventId %s) did not come after the compensation's", got, distinct[0].id)
	}
	for _, rp := range got {
		if rp.id == distinct[0].id && rp.typ != wantCharge {
			t.Errorf("eventId %s sent as %s and as %s", rp.id, wantCharge, rp.typ)
		}
	}
}

// With nothing to answer its commands (no service), the demo's saga fails
// once its wait for the charge step's reply runs out, and says which step
// got none: a demo that printed the command and went on would pass on a
// stack whose saga consumer never runs.
func TestDemoSagaFailsWhenNoReplyComes(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	d, err := newDemo("http://127.0.0.1:1", "demo-secret", "http://127.0.0.1:1", brokers)
	if err != nil {
		t.Fatal(err)
	}
	d.topics = demoTopics(t, brokers)
	d.replyWait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	started := time.Now()
	err = d.saga(ctx, 4002)
	if err == nil || !strings.Contains(err.Error(), "no reply to step "+chargeStep) {
		t.Fatalf("the saga with no one to answer: %v; want no reply to step %s", err, chargeStep)
	}
	if took := time.Since(started); took > 30*time.Second {
		t.Errorf("the saga gave up after %s; want about its reply wait, %s", took, d.replyWait)
	}
}
