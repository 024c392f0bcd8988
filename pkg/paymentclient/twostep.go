package paymentclient

import (
	"context"
	"strconv"
)

// CaptureManual is ChargeRequest.CaptureMethod for a two-step payment: the
// provider holds the amount (the payment is AUTHORIZED) until Capture
// takes it or Void releases it, or the hold lapses (EXPIRED).
const CaptureManual = "manual"

// CaptureRequest is the body of POST /payments/{id}/captures.
type CaptureRequest struct {
	// Amount is what to take, a decimal string such as "60.00": at most
	// the authorized amount; a partial capture releases the rest.
	Amount string `json:"amount"`
	// Currency is the authorized payment's.
	Currency string `json:"currency"`
	// ExternalCaptureID is the capture's id at the provider. Like the
	// idempotency key, it belongs to the operation: reuse it on retries;
	// a declined capture is tried again under a new key and a new one.
	ExternalCaptureID string `json:"externalCaptureId"`
}

// Authorize authorizes req as the business operation named by key: Charge
// with req.CaptureMethod set to CaptureManual, so the payment answered is
// AUTHORIZED, and nothing is taken until Capture. It has Charge's retry
// discipline and errors (ErrDeclined for a declined authorization); the
// key and the request, its CaptureMethod included, are the operation's,
// the same on every call for it.
func (c *Client) Authorize(ctx context.Context, key string, req ChargeRequest) (Result, error) {
	req.CaptureMethod = CaptureManual
	return c.Charge(ctx, key, req)
}

// Capture takes req of the authorized payment paymentID as the business
// operation named by key, with the same retry discipline as Charge (see
// the package documentation), and returns the payment as it stands after
// it: SUCCEEDED, with CapturedAmount. Result.Created is always true (the
// service answers a capture 201 only); Replayed says the answer is the
// one stored for the key.
//
// It also retries 409 payment-transition-in-progress after its
// Retry-After: another capture or void of the payment is being made and
// nothing is stored for this key, so the retry either goes (the other was
// declined) or meets the end that one made (ErrPaymentNotAuthorized).
//
// Errors, for errors.Is: ErrCaptureDeclined and ErrCaptureFailed (each a
// *Problem whose Payment is the payment, still AUTHORIZED),
// ErrPaymentNotAuthorized, ErrCaptureMismatch, ErrPaymentNotFound,
// ErrKeyReused, ErrValidation, ErrUnauthorized (each also a *Problem), or
// a *GaveUpError when it stopped retrying; that one Is ErrOutcomeUnknown
// when the capture may have been made.
func (c *Client) Capture(ctx context.Context, key string, paymentID int64, req CaptureRequest) (Result, error) {
	return c.transition(ctx, key, c.paymentURL(paymentID, "captures"), req)
}

// Void releases the hold of the authorized payment paymentID as the
// business operation named by key, with Capture's retry discipline, and
// returns the payment as it stands after it: VOIDED, its order free for a
// new payment.
//
// Errors, for errors.Is: ErrVoidDeclined and ErrVoidFailed (each a
// *Problem whose Payment is the payment, still AUTHORIZED),
// ErrPaymentNotAuthorized, ErrPaymentNotFound, ErrKeyReused,
// ErrValidation, ErrUnauthorized (each also a *Problem), or a
// *GaveUpError when it stopped retrying; that one Is ErrOutcomeUnknown
// when the void may have been made.
func (c *Client) Void(ctx context.Context, key string, paymentID int64) (Result, error) {
	return c.transition(ctx, key, c.paymentURL(paymentID, "voids"), struct{}{})
}

// transition runs a capture or a void: a command like a charge, whose
// answer is the payment.
func (c *Client) transition(ctx context.Context, key, url string, body any) (Result, error) {
	var res Result
	a, err := c.command(ctx, key, url, body, &res.Payment)
	if err != nil {
		return Result{}, err
	}
	res.Created, res.Replayed, res.Attempts = a.created, a.replayed, a.attempts
	return res, nil
}

// paymentURL is the address of one of payment paymentID's collections.
func (c *Client) paymentURL(paymentID int64, collection string) string {
	return c.paymentsURL + "/" + strconv.FormatInt(paymentID, 10) + "/" + collection
}
