// Command payment-demo walks through the service's guarantees against a
// running stack (`make dev` or `docker compose up`): it publishes an
// OrderCreated.v1 event, waits for the order projection, charges the order
// twice with one idempotency key and once with a changed body under the same
// key, prints every response, the payment row and the payment event; then
// refunds part of the payment, replays the refund under its key (one refund
// at the provider), is refused a refund beyond what is left, and lists the
// payment's refunds; then charges a second order through a provider that
// loses its answer, retries, and shows the provider charged once; and tries
// to pay that order again under a new key and a new external payment; then
// a two-step payment (twostep.go): an order authorized, part of it
// captured and the capture sent again, part of the capture refunded, and
// a second order authorized and voided. It charges, refunds, captures and
// voids through the reference client (pkg/paymentclient), as a client
// must: the same key on every retry, 409 request-in-progress and
// 503 retried after Retry-After, every attempt printed. Last, it runs the
// payment step of an order saga as an orchestrator does (saga.go): a
// ChargeOrder.v1 on payment.commands answered PaymentStepCharged.v1 on
// payment.replies, the step's payment read by the saga's client, a
// CompensateCharge.v1 answered PaymentStepCompensated.v1, and the charge
// step re-sent, answered with its stored reply; it fails if a reply does
// not come within a minute. And reconciliation (reconcile.go): a charge
// whose answer and webhook are lost, found by a run as missing_in_service,
// recorded by the client's retry, its item closed by the next run.
//
//	API_URL        default http://127.0.0.1:8080
//	API_KEY        default demo-secret
//	SAGA_API_KEY   default saga-secret (the key of the saga's client, SAGA_CLIENT_ID)
//	KAFKA_BROKERS  default 127.0.0.1:9092 (the dev stack's and compose's host listener)
//	PROVIDER_URL   default http://127.0.0.1:8081 (the provider, for what it holds)
//	PAYMENT_PROVIDER  sandbox or stripe, as the stack's; unset, the one at PROVIDER_URL
//	STRIPE_SECRET_KEY  default make dev's Stripe fake's key, to read what the fake holds
//
// Through Stripe (make dev PAYMENT_PROVIDER=stripe: the stateful Stripe
// fake) each charge pays with the fake's test payment methods
// (pm_card_visa; pm_fake_lostAnswer for the lost answer), what the
// provider holds is read by Stripe's API (provider.go), and the saga step
// is answered PaymentStepFailed.v1: a ChargeOrder.v1 carries no payment
// method, and Stripe charges none without one (decision 0035).
//
// The topics are the service's defaults: order.events, payment.events,
// payment.commands and payment.replies.
//
// With -seed-orders it only publishes the tour's orders (docs/tour.md: 1001,
// 1002, 1003) as OrderCreated.v1 events to order.events, once the topic
// exists, and exits: docker compose runs it so, as the one-shot service
// seed-orders (`make dev` writes the same orders into its database). The
// events' ids are fixed, so publishing them again is harmless: the
// consumer drops a duplicate eventId.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/example/payment-service/internal/demoorders"
	"github.com/example/payment-service/pkg/paymentclient"
)

// orderEventsTopic is where the order service publishes order events, and
// the service's consumer reads them (ORDER_EVENTS_TOPIC's default).
const orderEventsTopic = "order.events"

// topics are the topics the demo writes and reads.
type topics struct {
	orders   string // order events (ORDER_EVENTS_TOPIC)
	events   string // payment events (PAYMENT_EVENTS_TOPIC)
	commands string // the saga's commands (PAYMENT_COMMANDS_TOPIC)
	replies  string // the saga's replies (PAYMENT_REPLIES_TOPIC)
}

// defaultTopics are the service's defaults, which make dev and compose
// keep.
var defaultTopics = topics{orders: orderEventsTopic, events: "payment.events", commands: "payment.commands", replies: "payment.replies"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	seedOrders := flag.Bool("seed-orders", false, "only publish the tour's orders (docs/tour.md) as OrderCreated.v1 events, once order.events exists, and exit")
	flag.Parse()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	do := run
	if *seedOrders {
		do = seed
	}
	if err := do(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "payment-demo:", err)
		os.Exit(1)
	}
}

// seed publishes the tour's orders (package demoorders).
func seed(ctx context.Context) error {
	brokers := strings.Split(env("KAFKA_BROKERS", "127.0.0.1:9092"), ",")
	events := make([]demoorders.Event, len(demoorders.Tour))
	for i, o := range demoorders.Tour {
		events[i] = demoorders.TourEvent(o)
	}
	if err := demoorders.Publish(ctx, brokers, orderEventsTopic, events...); err != nil {
		return err
	}
	for _, e := range events {
		fmt.Printf("published OrderCreated.v1 for order %d (eventId %s)\n", e.Order.ID, e.EventID)
	}
	return nil
}

type demo struct {
	api     string
	key     string
	sagaKey string // the saga's client's key, to read a step's payment
	brokers []string
	topics  topics
	prov    provider
	http    *http.Client // prints every answer (printingTransport)
	client  *paymentclient.Client
	// orderPause is the pause between charges of an order the service
	// does not know yet (422 order-not-found).
	orderPause time.Duration
	// replyWait bounds the wait for each reply of a saga step: a step
	// waits up to SAGA_ORDER_WAIT (30 s) for its order, and its reply
	// leaves through the outbox.
	replyWait time.Duration
}

// newDemo returns a demo against the service at api, charging through the
// reference client over a transport that prints every attempt, on the
// service's default topics, through the sandbox at providerURL (run
// changes the provider to the stack's).
func newDemo(api, key, providerURL string, brokers []string) (demo, error) {
	d := demo{
		api:        strings.TrimRight(api, "/"),
		key:        key,
		sagaKey:    "saga-secret",
		brokers:    brokers,
		topics:     defaultTopics,
		prov:       provider{name: providerSandbox, url: strings.TrimRight(providerURL, "/")},
		http:       &http.Client{Timeout: 30 * time.Second, Transport: printingTransport{next: http.DefaultTransport}},
		orderPause: 200 * time.Millisecond,
		replyWait:  time.Minute,
	}
	client, err := paymentclient.New(paymentclient.Config{BaseURL: d.api, APIKey: key, HTTPClient: d.http})
	if err != nil {
		return demo{}, err
	}
	d.client = client
	return d, nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context) error {
	d, err := newDemo(env("API_URL", "http://127.0.0.1:8080"), env("API_KEY", "demo-secret"),
		env("PROVIDER_URL", "http://127.0.0.1:8081"), strings.Split(env("KAFKA_BROKERS", "127.0.0.1:9092"), ","))
	if err != nil {
		return err
	}
	d.sagaKey = env("SAGA_API_KEY", d.sagaKey)
	d.prov.name = detectProvider(ctx, d.prov.url, os.Getenv("PAYMENT_PROVIDER"))
	if d.prov.name == providerStripe {
		d.prov.key = env("STRIPE_SECRET_KEY", devStripeKey)
	}
	fmt.Printf("the stack charges through %s (its API: %s)\n", d.prov.name, d.prov.url)
	// A fresh order each run, so the demo can be repeated on one stack.
	orderID := 500_000 + time.Now().Unix()%1_000_000
	eventID, err := uuid.NewV7()
	if err != nil {
		return err
	}

	step("1. publish OrderCreated.v1 for order %d to order.events", orderID)
	if err := d.createOrder(ctx, eventID, uuid.New(), orderID); err != nil {
		return err
	}

	// The operation's key, made once: every attempt below sends it.
	key := "demo-" + eventID.String()
	req := d.prov.charge(orderID, fmt.Sprintf("pi_demo_%d", orderID))
	step("2. charge it: POST /payments, Idempotency-Key: %s (422 order-not-found until the consumer has projected the order; nothing is stored, so the same key is retried)", key)
	first, err := d.chargeOnceOrderKnown(ctx, key, req)
	if err != nil {
		return err
	}
	fmt.Printf("the order, visible to this client now that it has a payment for it:\n")
	if _, err := d.get(ctx, "/orders/"+strconv.FormatInt(orderID, 10)); err != nil {
		return err
	}
	step("3. the same request again: a replay, nothing charged")
	if res, err := d.client.Charge(ctx, key, req); err != nil || !res.Replayed {
		return fmt.Errorf("the same request again: %+v, %v; want the stored answer replayed", res, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
	}
	step("4. the same key with a changed amount: 409 idempotency-key-reused")
	changed := req
	changed.Amount = "999.00"
	if err := expect(d.client.Charge(ctx, key, changed))(paymentclient.ErrKeyReused); err != nil {
		return err
	}

	step("5. the payment row: GET /payments/%d", first.Payment.ID)
	if _, err := d.get(ctx, "/payments/"+strconv.FormatInt(first.Payment.ID, 10)); err != nil {
		return err
	}

	step("6. the payment event on payment.events (from the outbox)")
	if err := d.printPaymentEvent(ctx, first.Payment.ID); err != nil {
		return err
	}
	if err := d.refund(ctx, first.Payment, "demo-refund-"+eventID.String()); err != nil {
		return err
	}
	if err := d.lostAnswer(ctx, orderID+2_000_000); err != nil {
		return err
	}
	if err := d.twoStep(ctx, orderID+6_000_000, orderID+7_000_000); err != nil {
		return err
	}
	if err := d.saga(ctx, orderID+4_000_000); err != nil {
		return err
	}
	reconOrder := orderID + 8_000_000
	step("%d. publish OrderCreated.v1 for order %d", reconciliationSteps-1, reconOrder)
	if err := d.createOrder(ctx, uuid.Must(uuid.NewV7()), uuid.New(), reconOrder); err != nil {
		return err
	}
	return d.reconciliation(ctx, reconOrder)
}

// refundSteps numbers the refund's steps, after the charge's six.
const refundSteps = 7

// refund refunds 30.00 of payment (100.50, SUCCEEDED) as the operation
// named by key, sends the same refund again (the stored answer, and one
// refund at the provider), asks for more than is left under a new key (409
// refund-exceeds-payment, nothing refunded), and lists the payment's
// refunds.
func (d demo) refund(ctx context.Context, payment paymentclient.Payment, key string) error {
	req := paymentclient.RefundRequest{Amount: "30.00", ExternalRefundID: fmt.Sprintf("re_demo_%d", payment.ID)}
	step("%d. refund part of it: POST /payments/%d/refunds, Idempotency-Key: %s, 30.00 of the %s %s", refundSteps, payment.ID, key, payment.Amount, payment.Currency)
	first, err := d.client.Refund(ctx, key, payment.ID, req)
	if err != nil {
		return err
	}
	step("%d. the same refund again: a replay, the same refund, nothing refunded again", refundSteps+1)
	again, err := d.client.Refund(ctx, key, payment.ID, req)
	if err != nil || !again.Replayed || again.Refund.ID != first.Refund.ID {
		return fmt.Errorf("the same refund again: %+v, %v; want refund %d replayed", again, err, first.Refund.ID) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
	}
	fmt.Printf("what the provider refunded under the refund's provider key: one refund\n")
	if err := d.showRefund(ctx, payment.PaymentProvider+":"+payment.ExternalPaymentID, "refund:"+payment.PaymentProvider+":"+req.ExternalRefundID); err != nil {
		return err
	}
	step("%d. a new refund of 70.51, beyond the 70.50 left: 409 refund-exceeds-payment, nothing refunded", refundSteps+2)
	over := paymentclient.RefundRequest{Amount: "70.51", ExternalRefundID: req.ExternalRefundID + "_more"}
	if err := expect(d.client.Refund(ctx, key+"-more", payment.ID, over))(paymentclient.ErrRefundExceedsPayment); err != nil {
		return err
	}
	step("%d. the payment's refunds: GET /payments/%d/refunds", refundSteps+3, payment.ID)
	refunds, err := d.client.Refunds(ctx, payment.ID)
	if err != nil || len(refunds) != 1 || refunds[0].ID != first.Refund.ID {
		return fmt.Errorf("the payment's refunds: %+v, %v; want refund %d alone", refunds, err, first.Refund.ID) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
	}
	return nil
}

// demoCharge is the charge of a demo order (customer 42, 100.50 RUB)
// through the sandbox.
func demoCharge(orderID int64, externalPaymentID string) paymentclient.ChargeRequest {
	return provider{name: providerSandbox}.charge(orderID, externalPaymentID)
}

// expect checks that a charge or a refund was refused with want, and says
// so.
func expect[R any](_ R, err error) func(want error) error {
	return func(want error) error {
		if !errors.Is(err, want) {
			return fmt.Errorf("got %v, want %v", err, want) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
		}
		fmt.Printf("refused, as it must be: %v\n", err)
		return nil
	}
}

// lostAnswer charges a new order through a provider that charges and then
// drops the connection (the sandbox's drop_ prefix, the Stripe fake's
// pm_fake_lostAnswer): the service answers 503 outcome-unknown and keeps
// the payment; the provider's webhook, or the retry with the same key,
// records the provider's answer. Then a new key with a new external
// payment for the paid order is refused by the third layer.
func (d demo) lostAnswer(ctx context.Context, orderID int64) error {
	eventID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	step("11. an answer lost: order %d, charged through a provider that drops the connection after charging", orderID)
	if err := d.createOrder(ctx, eventID, uuid.New(), orderID); err != nil {
		return err
	}
	key := "demo-lost-" + eventID.String()
	req := d.prov.lostAnswer(orderID)
	step("12. the client gets 503 outcome-unknown and retries by itself, after Retry-After, with the same key and body: the payment is SUCCEEDED, recorded by the provider's webhook if it came first (make dev and compose send them), else by the retry")
	res, err := d.chargeOnceOrderKnown(ctx, key, req)
	if err != nil {
		return err
	}
	fmt.Printf("payment %d %s after %d attempts under one key\n", res.Payment.ID, res.Payment.Status, res.Attempts)
	step("13. what the provider charged under that key: one charge (asked for once when the webhook resolved it; a retry that asked again was answered from its ledger)")
	if err := d.showCharge(ctx, d.prov.name+":"+req.ExternalPaymentID); err != nil {
		return err
	}
	step("14. the same order again with a new key and a new external payment: 409 order-already-paid")
	return expect(d.client.Charge(ctx, key+"-again", d.prov.charge(orderID, "pi_demo_again_"+strconv.FormatInt(orderID, 10))))(paymentclient.ErrOrderAlreadyPaid)
}

// createOrder publishes OrderCreated.v1 of the order's saga. The first
// charge waits for the projection (chargeOnceOrderKnown, or the saga step
// itself): a client sees an order on GET /orders only once it has a payment
// for it.
func (d demo) createOrder(ctx context.Context, eventID, sagaID uuid.UUID, orderID int64) error {
	event := demoorders.Event{EventID: eventID, SagaID: sagaID, OccurredAt: time.Now(),
		Order: demoorders.Order{ID: orderID, CustomerID: 42, Amount: "100.50", Currency: "RUB"}}
	if err := demoorders.Publish(ctx, d.brokers, d.topics.orders, event); err != nil {
		return err
	}
	m, err := event.Message()
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", m.Value)
	return nil
}

func step(format string, args ...any) {
	fmt.Printf("\n== "+format+"\n", args...)
}

// printingTransport prints every answer, headers that matter and body, so
// the demo shows each attempt, the client's own retries included.
type printingTransport struct{ next http.RoundTripper }

func (p printingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(req)
	if err != nil {
		fmt.Printf("%s %s -> no answer: %v\n", req.Method, req.URL.Path, err)
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	fmt.Printf("%s %s -> %s", req.Method, req.URL.Path, resp.Status)
	for _, h := range []string{"Idempotent-Replayed", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			fmt.Printf("  (%s: %s)", h, v)
		}
	}
	fmt.Printf("\n%s\n", b)
	return resp, nil
}

func (d demo) get(ctx context.Context, path string) ([]byte, error) {
	return d.getFrom(ctx, d.api, path)
}

// getFrom reads path from base with the demo's key, or the provider's own
// key when base is the provider's and it has one.
func (d demo) getFrom(ctx context.Context, base, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	key := d.key
	if base == d.prov.url && d.prov.key != "" {
		key = d.prov.key
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// chargeOnceOrderKnown charges through the reference client, which retries
// what may still succeed with the same key (no answer, 503, 409
// request-in-progress, each after its Retry-After), and charges again while
// the answer is 422 order-not-found: the order is unknown until the
// consumer has projected it, and a 422 stores nothing, so retrying the same
// key is the documented way to wait.
func (d demo) chargeOnceOrderKnown(ctx context.Context, key string, req paymentclient.ChargeRequest) (paymentclient.Result, error) {
	for {
		res, err := d.client.Charge(ctx, key, req)
		if !errors.Is(err, paymentclient.ErrOrderNotFound) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return paymentclient.Result{}, fmt.Errorf("the order never became known: %w", ctx.Err())
		case <-time.After(d.orderPause):
		}
	}
}

// printPaymentEvent finds the event of paymentID on payment.events and
// prints it.
func (d demo) printPaymentEvent(ctx context.Context, paymentID int64) error {
	m, err := d.awaitRecord(ctx, d.topics.events, 30*time.Second, func(m kafka.Message) bool {
		var ev struct {
			PaymentID int64 `json:"paymentId"`
		}
		return json.Unmarshal(m.Value, &ev) == nil && ev.PaymentID == paymentID
	})
	if err != nil {
		return fmt.Errorf("no payment event within 30s (is the outbox relay running? KAFKA_BROKERS set for the service?): %w", err)
	}
	printRecord(m)
	return nil
}

// awaitRecord reads topic from the start of each partition until a record
// matches, for wait at most.
func (d demo) awaitRecord(ctx context.Context, topic string, wait time.Duration, match func(kafka.Message) bool) (kafka.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", d.brokers[0])
	if err != nil {
		return kafka.Message{}, err
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return kafka.Message{}, err
	}
	found := make(chan kafka.Message, len(parts))
	for _, p := range parts {
		go func() {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: d.brokers, Topic: topic, Partition: p.ID, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				if match(m) {
					found <- m
					return
				}
			}
		}()
	}
	select {
	case m := <-found:
		return m, nil
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	}
}

// printRecord prints a record's headers, key, place and value.
func printRecord(m kafka.Message) {
	for _, h := range m.Headers {
		fmt.Printf("header %s: %s\n", h.Key, h.Value)
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, m.Value, "", "  ")
	fmt.Printf("key %s, partition %d, offset %d\n%s\n", m.Key, m.Partition, m.Offset, pretty.String())
}
