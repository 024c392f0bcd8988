package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
)

// The saga's part of the demo: the payment step of an order saga, sent as
// an orchestrator sends it (api/asyncapi.yaml, payment.commands and
// payment.replies), and the step's payment read back over HTTP with the
// saga client's key.

// sagaSteps numbers the saga's steps, after the two-step payment's.
const sagaSteps = 20

// The step names the demo's saga gives its two steps.
const (
	chargeStep     = "charge-payment"
	compensateStep = "refund-payment"
)

// The reply types the demo waits for (api/asyncapi.yaml).
const (
	replyCharged     = "PaymentStepCharged.v1"
	replyFailed      = "PaymentStepFailed.v1"
	replyCompensated = "PaymentStepCompensated.v1"
)

// chargeOrder is a ChargeOrder.v1, its members in the contract's order.
type chargeOrder struct {
	EventID           string `json:"eventId"`
	EventType         string `json:"eventType"`
	SagaID            string `json:"sagaId"`
	StepName          string `json:"stepName"`
	OrderID           int64  `json:"orderId"`
	CustomerID        int64  `json:"customerId"`
	Amount            string `json:"amount"`
	Currency          string `json:"currency"`
	PaymentProvider   string `json:"paymentProvider"`
	ExternalPaymentID string `json:"externalPaymentId"`
	OccurredAt        string `json:"occurredAt"`
}

// compensateCharge is a CompensateCharge.v1.
type compensateCharge struct {
	EventID     string `json:"eventId"`
	EventType   string `json:"eventType"`
	SagaID      string `json:"sagaId"`
	StepName    string `json:"stepName"`
	Compensates string `json:"compensates"`
	OccurredAt  string `json:"occurredAt"`
}

// sagaReply is what the demo reads of a reply.
type sagaReply struct {
	EventID   string `json:"eventId"`
	EventType string `json:"eventType"`
	SagaID    string `json:"sagaId"`
	StepName  string `json:"stepName"`
	PaymentID int64  `json:"paymentId"`
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	RefundID  int64  `json:"refundId"`
	Code      string `json:"code"`
	Detail    string `json:"detail"`
}

// newEventID is a command's eventId: a UUID v7, as the service makes its
// own.
func newEventID() (string, error) {
	id, err := uuid.NewV7()
	return id.String(), err
}

// now is a command's occurredAt.
func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// saga runs one order saga's payment step as its orchestrator would: the
// order announced, the charge step sent by command and answered on the
// replies topic, the step's payment read over HTTP by the saga's client,
// the charge compensated (refunded) by a second step, and the charge step
// sent again as an orchestrator re-sends after a timeout, which charges
// nothing again and is answered with the stored reply, its eventId the
// same. Each wait for a reply is bounded by replyWait.
func (d demo) saga(ctx context.Context, orderID int64) error {
	sagaUUID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	sagaID := sagaUUID.String()
	orderEvent, err := uuid.NewV7()
	if err != nil {
		return err
	}
	step("%d. an order saga by command: OrderCreated.v1 for order %d of saga %s to %s, then at once ChargeOrder.v1 (step %s) to %s, keyed by the sagaId: the step waits for the order's projection itself",
		sagaSteps, orderID, sagaID, d.topics.orders, chargeStep, d.topics.commands)
	if err := d.createOrder(ctx, orderEvent, sagaUUID, orderID); err != nil {
		return err
	}
	req := d.prov.charge(orderID, fmt.Sprintf("pi_demo_saga_%d", orderID))
	// Through Stripe the step cannot charge: a ChargeOrder.v1 carries no
	// payment method, and the adapter refuses a charge without one for
	// good (decision 0035). The step fails, and its compensation gives
	// back nothing.
	wantCharge, wantBack := replyCharged, req.Amount
	if d.prov.name == providerStripe {
		wantCharge, wantBack = replyFailed, "0"
	}
	charge := chargeOrder{EventType: "ChargeOrder.v1", SagaID: sagaID, StepName: chargeStep, OrderID: req.OrderID,
		CustomerID: req.CustomerID, Amount: req.Amount, Currency: req.Currency, PaymentProvider: req.PaymentProvider,
		ExternalPaymentID: req.ExternalPaymentID, OccurredAt: now()}
	if charge.EventID, err = newEventID(); err != nil {
		return err
	}
	if err := d.sendCommand(ctx, sagaID, charge.EventID, charge.EventType, charge); err != nil {
		return err
	}

	step("%d. its reply on %s: %s, written to the outbox by the statement that recorded the charge", sagaSteps+1, d.topics.replies, wantCharge)
	chargedAt, charged, err := d.awaitReply(ctx, sagaID, chargeStep, nil)
	if err != nil {
		return err
	}
	if charged.EventType != wantCharge || charged.PaymentID == 0 {
		return fmt.Errorf("the charge step was answered %s (%s %s) for payment %d, want %s with its payment", charged.EventType, charged.Code, charged.Detail, charged.PaymentID, wantCharge)
	}

	step("%d. the step's payment over HTTP: GET /payments/%d with the saga client's key (a step's payment belongs to SAGA_CLIENT_ID, saga)", sagaSteps+2, charged.PaymentID)
	if err := d.getOK(ctx, d.sagaKey, "/payments/"+strconv.FormatInt(charged.PaymentID, 10)); err != nil {
		return err
	}

	step("%d. compensate it: CompensateCharge.v1 (step %s, compensates %s): what the step charged refunded (%s), answered %s", sagaSteps+3, compensateStep, chargeStep, wantBack, replyCompensated)
	compensate := compensateCharge{EventType: "CompensateCharge.v1", SagaID: sagaID, StepName: compensateStep,
		Compensates: chargeStep, OccurredAt: now()}
	if compensate.EventID, err = newEventID(); err != nil {
		return err
	}
	if err := d.sendCommand(ctx, sagaID, compensate.EventID, compensate.EventType, compensate); err != nil {
		return err
	}
	_, compensated, err := d.awaitReply(ctx, sagaID, compensateStep, nil)
	if err != nil {
		return err
	}
	if compensated.EventType != replyCompensated || (compensated.RefundID == 0) != (wantBack == "0") || compensated.Amount != wantBack {
		return fmt.Errorf("the compensation was answered %s (amount %q, refund %d; %s %s), want %s of %s",
			compensated.EventType, compensated.Amount, compensated.RefundID, compensated.Code, compensated.Detail, replyCompensated, wantBack)
	}

	step("%d. the charge step sent again, with a new eventId, as an orchestrator re-sends after a timeout: nothing charged again, the stored reply published again with its eventId %s", sagaSteps+4, charged.EventID)
	again := charge
	again.OccurredAt = now()
	if again.EventID, err = newEventID(); err != nil {
		return err
	}
	if err := d.sendCommand(ctx, sagaID, again.EventID, again.EventType, again); err != nil {
		return err
	}
	_, replayed, err := d.awaitReply(ctx, sagaID, chargeStep, &chargedAt)
	if err != nil {
		return err
	}
	if replayed.EventID != charged.EventID || replayed.EventType != wantCharge {
		return fmt.Errorf("the re-sent charge step was answered %s with eventId %s, want the stored %s with eventId %s",
			replayed.EventType, replayed.EventID, wantCharge, charged.EventID)
	}
	fmt.Printf("the provider's charge under the step's provider key: one key, at most one charge (none through Stripe); the re-sent step did not reach the provider\n")
	return d.showCharge(ctx, d.prov.name+":"+req.ExternalPaymentID)
}

// sendCommand publishes one command to the commands topic, keyed by its
// sagaId (one saga's commands in order on one partition), its eventId and
// eventType as headers too, as the contract asks of an orchestrator.
func (d demo) sendCommand(ctx context.Context, sagaID, eventID, eventType string, command any) (err error) {
	value, err := json.Marshal(command)
	if err != nil {
		return err
	}
	// A transport of its own reads the topic's metadata afresh: kafka-go's
	// default one is the process's, and caches what it read before the
	// topic existed.
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(d.brokers...), Topic: d.topics.commands, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Transport: transport}
	defer func() { err = errors.Join(err, w.Close()) }()
	err = w.WriteMessages(ctx, kafka.Message{Key: []byte(sagaID), Value: value,
		Headers: []kafka.Header{{Key: "eventId", Value: []byte(eventID)}, {Key: "eventType", Value: []byte(eventType)}}})
	if err != nil {
		return fmt.Errorf("publish %s to %s at %v: %w", eventType, d.topics.commands, d.brokers, err)
	}
	fmt.Printf("%s\n", value)
	return nil
}

// awaitReply waits, for replyWait at most, for a reply to the step of the
// saga, after the record after when one is given (a re-sent step's reply
// is a new record of the same partition), and prints it.
func (d demo) awaitReply(ctx context.Context, sagaID, stepName string, after *kafka.Message) (kafka.Message, sagaReply, error) {
	m, err := d.awaitRecord(ctx, d.topics.replies, d.replyWait, func(m kafka.Message) bool {
		if after != nil && (m.Partition != after.Partition || m.Offset <= after.Offset) {
			return false
		}
		var r sagaReply
		return json.Unmarshal(m.Value, &r) == nil && r.SagaID == sagaID && r.StepName == stepName
	})
	var reply sagaReply
	if err == nil {
		err = json.Unmarshal(m.Value, &reply)
	}
	if err != nil {
		return kafka.Message{}, sagaReply{}, fmt.Errorf("no reply to step %s of saga %s on %s within %s (is the service's saga consumer running? KAFKA_BROKERS set for the service, and %s created?): %w",
			stepName, sagaID, d.topics.replies, d.replyWait, d.topics.commands, err)
	}
	printRecord(m)
	return m, reply, nil
}

// getOK reads path from the service with key and fails unless it answers
// 200; the transport prints the answer.
func (d demo) getOK(ctx context.Context, key, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.api+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s answered %s, want 200 (is SAGA_API_KEY the key of the saga's client, SAGA_CLIENT_ID, in the service's API_KEYS?)", path, resp.Status)
	}
	return nil
}
