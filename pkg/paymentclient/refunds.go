package paymentclient

import (
	"context"
	"net/http"
)

// RefundRequest is the body of POST /payments/{id}/refunds. The currency
// and the provider are the payment's.
type RefundRequest struct {
	// Amount is how much to give back, a decimal string such as "10.00",
	// in the payment's currency: never a float.
	Amount string `json:"amount"`
	// ExternalRefundID is the provider's refund id. Like the idempotency
	// key, it belongs to the operation: reuse it on retries.
	ExternalRefundID string `json:"externalRefundId"`
}

// Refund is a refund as the service records it (the API's Refund schema).
type Refund struct {
	// ID is the service's refund id.
	ID int64 `json:"id"`
	// PaymentID is the refunded payment.
	PaymentID int64 `json:"paymentId"`
	// ExternalRefundID is the request's: one real refund at the provider.
	ExternalRefundID string `json:"externalRefundId"`
	// Status is PENDING (the provider is being asked, or its answer is
	// unknown: the amount still counts against the payment), SUCCEEDED,
	// DECLINED or FAILED.
	Status string `json:"status"`
	// Amount is what is given back, a decimal string; the currency and
	// the provider are the payment's.
	Amount          string `json:"amount"`
	Currency        string `json:"currency"`
	PaymentProvider string `json:"paymentProvider"`
}

// RefundResult is a successful refund.
type RefundResult struct {
	Refund Refund
	// Created is true for 201 (this operation made the refund) and false
	// for 200 (the external refund was already recorded as this very
	// refund, under another key).
	Created bool
	// Replayed is true when the answer is the one stored for the key by an
	// earlier attempt (the Idempotent-Replayed header).
	Replayed bool
	// Attempts is how many requests it took.
	Attempts int
}

// Refund refunds req of payment paymentID as the business operation named
// by key, with the same retry discipline as Charge (see the package
// documentation): one key for the operation, the same key and request on
// every retry, retried only on no answer, 503, 409 request-in-progress and
// a gateway's answer, until a final answer, the end of ctx, or
// RetryPolicy.MaxAttempts.
//
// It returns the refund, or an error to switch on with errors.Is:
// ErrRefundDeclined and ErrRefundFailed (each a *Problem whose Refund is
// the recorded refund), ErrRefundExceedsPayment, ErrPaymentNotRefundable,
// ErrPaymentNotFound, ErrExternalRefundConflict, ErrKeyReused,
// ErrValidation, ErrUnauthorized (each also a *Problem), or a
// *GaveUpError when it stopped retrying; that one Is ErrOutcomeUnknown
// when the refund may have been made, and wraps the context's error when
// the context ended.
func (c *Client) Refund(ctx context.Context, key string, paymentID int64, req RefundRequest) (RefundResult, error) {
	var res RefundResult
	a, err := c.command(ctx, key, c.refundsURL(paymentID), req, &res.Refund)
	if err != nil {
		return RefundResult{}, err
	}
	res.Created, res.Replayed, res.Attempts = a.created, a.replayed, a.attempts
	return res, nil
}

// Refunds lists the refunds of payment paymentID, oldest first. A read
// moves no money, so it is retried like a command but never gives up with
// ErrOutcomeUnknown. Errors: ErrPaymentNotFound, ErrValidation,
// ErrUnauthorized (each a *Problem), or a *GaveUpError.
func (c *Client) Refunds(ctx context.Context, paymentID int64) ([]Refund, error) {
	var list struct {
		Refunds []Refund `json:"refunds"`
	}
	if _, err := c.do(ctx, attempt{method: http.MethodGet, url: c.refundsURL(paymentID)}, &list); err != nil {
		return nil, err
	}
	return list.Refunds, nil
}

func (c *Client) refundsURL(paymentID int64) string { return c.paymentURL(paymentID, "refunds") }
