package paymentclient_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/example/payment-service/pkg/paymentclient"
)

// One business operation: the key is made once and stored with the order
// before the first attempt, so that every retry, also after a restart of
// this process, sends the same key and the same request.
func ExampleClient_Charge() {
	client, err := paymentclient.New(paymentclient.Config{BaseURL: "http://127.0.0.1:8080", APIKey: "demo-secret"})
	if err != nil {
		log.Fatal(err)
	}
	key := paymentclient.NewIdempotencyKey() // store it with order 1001 now
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := client.Charge(ctx, key, paymentclient.ChargeRequest{
		OrderID: 1001, CustomerID: 42, Amount: "100.50", Currency: "RUB",
		PaymentProvider: "sandbox", ExternalPaymentID: "pi_demo_1",
	})
	var declined *paymentclient.DeclinedError
	switch {
	case err == nil:
		log.Printf("paid: payment %d", res.Payment.ID)
	case errors.As(err, &declined):
		log.Printf("declined: payment %d", declined.Payment.ID)
	case errors.Is(err, paymentclient.ErrOrderAlreadyPaid):
		log.Print("the order is paid by another payment: nothing was charged by this one")
	case errors.Is(err, paymentclient.ErrOutcomeUnknown):
		log.Print("may have been charged: call Charge again later with the same key and request")
	default:
		log.Printf("refused (see the error; a *GaveUpError without ErrOutcomeUnknown charged nothing): %v", err)
	}
}

// A refund is one business operation too: its key and its external refund
// id are made once and stored with the refund before the first attempt.
// Refunds lists what the payment has given back so far.
func ExampleClient_Refund() {
	client, err := paymentclient.New(paymentclient.Config{BaseURL: "http://127.0.0.1:8080", APIKey: "demo-secret"})
	if err != nil {
		log.Fatal(err)
	}
	const paymentID = 1
	key := paymentclient.NewIdempotencyKey() // store it with the refund now
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := client.Refund(ctx, key, paymentID, paymentclient.RefundRequest{Amount: "30.00", ExternalRefundID: "re_demo_1"})
	var p *paymentclient.Problem
	switch {
	case err == nil:
		log.Printf("refunded: refund %d, %s %s", res.Refund.ID, res.Refund.Amount, res.Refund.Currency)
	case errors.Is(err, paymentclient.ErrRefundExceedsPayment):
		log.Print("more than is left of the payment: nothing was refunded")
	case errors.Is(err, paymentclient.ErrRefundDeclined) && errors.As(err, &p):
		log.Printf("declined: refund %d; its amount may be refunded as a new operation", p.Refund.ID)
	case errors.Is(err, paymentclient.ErrOutcomeUnknown):
		log.Print("may have been refunded: call Refund again later with the same key and request")
	default:
		log.Printf("refused (see the error; a *GaveUpError without ErrOutcomeUnknown refunded nothing): %v", err)
	}
	refunds, err := client.Refunds(ctx, paymentID)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range refunds {
		log.Printf("refund %d: %s %s %s", r.ID, r.Amount, r.Currency, r.Status)
	}
}

// A two-step payment: the authorization holds the amount, and a capture
// takes all or part of it later, or a void releases it. Each of the three
// is a business operation of its own, with its own key made once and
// stored with it.
func ExampleClient_Capture() {
	client, err := paymentclient.New(paymentclient.Config{BaseURL: "http://127.0.0.1:8080", APIKey: "demo-secret"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	auth, err := client.Authorize(ctx, paymentclient.NewIdempotencyKey(), paymentclient.ChargeRequest{
		OrderID: 1002, CustomerID: 42, Amount: "2500.00", Currency: "RUB",
		PaymentProvider: "sandbox", ExternalPaymentID: "pi_hold_1",
	})
	if err != nil {
		log.Fatal(err) // as for Charge: ErrDeclined, ErrOutcomeUnknown, ...
	}
	res, err := client.Capture(ctx, paymentclient.NewIdempotencyKey(), auth.Payment.ID,
		paymentclient.CaptureRequest{Amount: "1500.00", Currency: "RUB", ExternalCaptureID: "cap_hold_1"})
	switch {
	case err == nil:
		log.Printf("captured %s of %s", res.Payment.CapturedAmount, res.Payment.Amount)
	case errors.Is(err, paymentclient.ErrPaymentNotAuthorized):
		log.Print("nothing to capture: voided, lapsed or captured already; nothing was stored for this key")
	case errors.Is(err, paymentclient.ErrCaptureDeclined):
		log.Print("declined: the hold stays; a new attempt needs a new key and a new external capture id")
	case errors.Is(err, paymentclient.ErrOutcomeUnknown):
		log.Print("may have been captured: call Capture again later with the same key and request")
	default:
		log.Printf("refused: %v", err)
	}
}
