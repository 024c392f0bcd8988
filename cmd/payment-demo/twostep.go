package main

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/example/payment-service/pkg/paymentclient"
)

// twoStepSteps numbers the two-step payment's steps, after the lost
// answer's.
const twoStepSteps = 15

// twoStep runs a two-step payment through the reference client, on two new
// orders: the first authorized (AUTHORIZED, the provider holds 100.50),
// 60.00 of it captured (the rest released) and the capture sent again (the
// stored answer, one capture at the provider), 20.00 of the capture
// refunded and 40.01 more refused (refunds are of captured money only); the
// second authorized and voided (VOIDED, the hold released, the order
// free), and a capture of it refused with 409 payment-not-authorized.
func (d demo) twoStep(ctx context.Context, captured, voided int64) error {
	held, err := d.authorizeOrder(ctx, twoStepSteps, captured)
	if err != nil {
		return err
	}
	key := "demo-capture-" + uuid.NewString()
	req := paymentclient.CaptureRequest{Amount: "60.00", Currency: held.Currency, ExternalCaptureID: fmt.Sprintf("cap_demo_%d", held.ID)}
	step("%d. capture 60.00 of it: POST /payments/%d/captures, Idempotency-Key: %s: the payment SUCCEEDED with capturedAmount 60.00, the other 40.50 released; then the same capture again, a replay",
		twoStepSteps+1, held.ID, key)
	first, err := d.client.Capture(ctx, key, held.ID, req)
	if err != nil {
		return err
	}
	if first.Payment.Status != "SUCCEEDED" || first.Payment.CapturedAmount != "60.00" {
		return fmt.Errorf("the capture: %+v; want the payment SUCCEEDED with 60.00 captured", first.Payment)
	}
	if again, err := d.client.Capture(ctx, key, held.ID, req); err != nil || !again.Replayed || again.Payment.ID != first.Payment.ID || again.Payment.CapturedAmount != first.Payment.CapturedAmount {
		return fmt.Errorf("the same capture again: %+v, %v; want the stored answer replayed", again, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
	}
	fmt.Printf("what the provider captured under the capture's provider key: one capture of 60.00\n")
	if err := d.showCapture(ctx, held.PaymentProvider+":"+held.ExternalPaymentID+":capture:"+req.ExternalCaptureID); err != nil {
		return err
	}

	refundKey := "demo-capture-refund-" + uuid.NewString()
	step("%d. refund 20.00 of the capture: POST /payments/%d/refunds; refunds are of captured money only, so 40.01 more (beyond the 40.00 left of the 60.00) is 409 refund-exceeds-payment",
		twoStepSteps+2, held.ID)
	refund := paymentclient.RefundRequest{Amount: "20.00", ExternalRefundID: fmt.Sprintf("re_demo_capture_%d", held.ID)}
	if res, err := d.client.Refund(ctx, refundKey, held.ID, refund); err != nil || res.Refund.Status != "SUCCEEDED" {
		return fmt.Errorf("the refund of part of the capture: %+v, %v; want it SUCCEEDED", res, err) //nolint:errorlint // err may be nil: the message shows what came back, and nothing classifies it
	}
	over := paymentclient.RefundRequest{Amount: "40.01", ExternalRefundID: refund.ExternalRefundID + "_more"}
	if err := expect(d.client.Refund(ctx, refundKey+"-more", held.ID, over))(paymentclient.ErrRefundExceedsPayment); err != nil {
		return err
	}

	released, err := d.authorizeOrder(ctx, twoStepSteps+3, voided)
	if err != nil {
		return err
	}
	voidKey := "demo-void-" + uuid.NewString()
	step("%d. void it: POST /payments/%d/voids, Idempotency-Key: %s: the payment VOIDED, the hold released, the order free for a new payment",
		twoStepSteps+4, released.ID, voidKey)
	res, err := d.client.Void(ctx, voidKey, released.ID)
	if err != nil {
		return err
	}
	if res.Payment.Status != "VOIDED" {
		return fmt.Errorf("the void: %+v; want the payment VOIDED", res.Payment)
	}
	fmt.Printf("a capture of the voided payment holds nothing to take:\n")
	late := paymentclient.CaptureRequest{Amount: "1.00", Currency: released.Currency, ExternalCaptureID: fmt.Sprintf("cap_demo_%d", released.ID)}
	return expect(d.client.Capture(ctx, voidKey+"-capture", released.ID, late))(paymentclient.ErrPaymentNotAuthorized)
}

// authorizeOrder publishes a new order and authorizes it (captureMethod
// manual) once the service knows it, as step n; the payment is AUTHORIZED.
func (d demo) authorizeOrder(ctx context.Context, n int, orderID int64) (paymentclient.Payment, error) {
	eventID, err := uuid.NewV7()
	if err != nil {
		return paymentclient.Payment{}, err
	}
	step("%d. a two-step payment: order %d, authorized with \"captureMethod\":\"manual\": the provider holds the amount, the payment is AUTHORIZED, nothing is taken yet", n, orderID)
	if err := d.createOrder(ctx, eventID, uuid.New(), orderID); err != nil {
		return paymentclient.Payment{}, err
	}
	req := d.prov.charge(orderID, fmt.Sprintf("pi_demo_hold_%d", orderID))
	req.CaptureMethod = paymentclient.CaptureManual
	res, err := d.chargeOnceOrderKnown(ctx, "demo-authorize-"+eventID.String(), req)
	if err != nil {
		return paymentclient.Payment{}, err
	}
	if res.Payment.Status != "AUTHORIZED" {
		return paymentclient.Payment{}, fmt.Errorf("the authorization of order %d: %+v; want the payment AUTHORIZED", orderID, res.Payment)
	}
	return res.Payment, nil
}
