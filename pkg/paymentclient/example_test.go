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
