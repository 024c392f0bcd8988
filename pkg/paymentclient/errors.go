package paymentclient

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Errors to switch on with errors.Is. Each final answer of the service is
// one of them; they are never retried.
var (
	// ErrDeclined: the provider declined the charge (402). The payment is
	// recorded as DECLINED; the error is a *DeclinedError. A new attempt
	// for the order needs a new operation (a new key and, usually, a new
	// external payment id).
	ErrDeclined = errors.New("payment declined")
	// ErrPaymentFailed: the provider refused the charge request for good
	// and holds no charge for it (402 payment-failed). Nothing was
	// charged; the payment is recorded as FAILED (Problem.Payment) and the
	// order is free. No retry changes it: a new attempt needs a new
	// operation (a new key and a new external payment id).
	ErrPaymentFailed = errors.New("payment failed")
	// ErrKeyReused: the key was used before for a different request (409
	// idempotency-key-reused). A bug in the caller: one key, one operation.
	ErrKeyReused = errors.New("idempotency key reused for a different request")
	// ErrOrderAlreadyPaid: the order is paid under another external payment
	// (409 order-already-paid). Nothing was charged by this operation.
	ErrOrderAlreadyPaid = errors.New("order already paid")
	// ErrExternalPaymentConflict: the external payment id is recorded for a
	// different charge (409 external-payment-conflict).
	ErrExternalPaymentConflict = errors.New("external payment id recorded for a different charge")
	// ErrValidation: the request is invalid (400); Problem.Errors names the
	// fields. Nothing was stored: fix it and call again with the same key.
	ErrValidation = errors.New("invalid request")
	// ErrUnauthorized: the API key is wrong or missing (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrOrderNotFound: the service does not know the order yet (422).
	// Nothing was stored: the same key may be used once the order exists.
	ErrOrderNotFound = errors.New("order not found")
	// ErrOrderMismatch: the customer, amount or currency differ from the
	// order's (422). Nothing was stored.
	ErrOrderMismatch = errors.New("charge does not match the order")
	// ErrOutcomeUnknown: Charge or Refund gave up while the money may have
	// moved (a *GaveUpError). Call it again later with the same key and
	// request to learn the outcome; never with a new key, a new external
	// payment id or a new external refund id.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// The refund's own final answers (POST /payments/{id}/refunds).

	// ErrPaymentNotFound: no such payment, or another client's (404
	// payment-not-found; the service does not tell the two apart).
	ErrPaymentNotFound = errors.New("payment not found")
	// ErrPaymentNotRefundable: the payment is not SUCCEEDED (409
	// payment-not-refundable). Nothing was stored: the same key may be
	// used once the payment has succeeded.
	ErrPaymentNotRefundable = errors.New("payment not refundable")
	// ErrRefundExceedsPayment: the refund would take the payment's
	// PENDING and SUCCEEDED refunds beyond its amount (409
	// refund-exceeds-payment). Nothing was refunded or stored; it is not
	// retried, because it changes only if a refund in progress is
	// declined: then the same call, with the same key, may succeed.
	ErrRefundExceedsPayment = errors.New("refund exceeds what is left of the payment")
	// ErrRefundDeclined: the provider declined the refund (422
	// refund-declined). The refund is recorded DECLINED (Problem.Refund);
	// this is the key's answer from now on, and its amount may be refunded
	// again as a new operation (a new key and a new external refund id).
	ErrRefundDeclined = errors.New("refund declined")
	// ErrRefundFailed: the provider refused the refund request for good
	// and holds no refund for it (422 refund-failed). The refund is
	// recorded FAILED (Problem.Refund); nothing was refunded, and its
	// amount may be refunded again as a new operation.
	ErrRefundFailed = errors.New("refund failed")
	// ErrExternalRefundConflict: the external refund id is recorded for a
	// different refund (409 external-refund-conflict). Nothing was
	// refunded; the answer says nothing of the other refund.
	ErrExternalRefundConflict = errors.New("external refund id recorded for a different refund")

	// The final answers of a capture and a void (POST
	// /payments/{id}/captures and /voids). None of them is stored but the
	// declines and failures: the others leave the key free.

	// ErrPaymentNotAuthorized: the payment holds nothing to capture or
	// void (409 payment-not-authorized): it was charged in one step, or
	// is captured, voided, lapsed, or not decided yet. Nothing was stored
	// or moved.
	ErrPaymentNotAuthorized = errors.New("payment not authorized")
	// ErrTransitionInProgress: another capture or void of the payment is
	// being made (409 payment-transition-in-progress). Capture and Void
	// retry it after its Retry-After; a *GaveUpError that wraps it
	// (errors.Is matches through) means the other one is still running.
	ErrTransitionInProgress = errors.New("another capture or void of the payment is in progress")
	// ErrCaptureMismatch: the capture is above the authorized amount, or in
	// another currency (409 capture-mismatch). Nothing was stored.
	ErrCaptureMismatch = errors.New("capture does not match the authorization")
	// ErrCaptureDeclined: the provider declined the capture (422
	// capture-declined); Problem.Payment is still AUTHORIZED. It is the
	// key's answer from now on: a new attempt needs a new key and a new
	// externalCaptureId.
	ErrCaptureDeclined = errors.New("capture declined")
	// ErrCaptureFailed: the provider refused the capture for good (422
	// capture-failed), the hold lapsed, say. Nothing was captured.
	ErrCaptureFailed = errors.New("capture failed")
	// ErrVoidDeclined: the provider declined the void (422 void-declined);
	// Problem.Payment is still AUTHORIZED.
	ErrVoidDeclined = errors.New("void declined")
	// ErrVoidFailed: the provider refused the void for good (422
	// void-failed): the hold was captured or lapsed. Nothing was voided.
	ErrVoidFailed = errors.New("void failed")
)

// Problem codes of the service (api/openapi.yaml) this package acts on.
const (
	codeDeclined                = "payment-declined"
	codePaymentFailed           = "payment-failed"
	codeKeyReused               = "idempotency-key-reused"
	codeOrderAlreadyPaid        = "order-already-paid"
	codeExternalPaymentConflict = "external-payment-conflict"
	codeRequestInProgress       = "request-in-progress"
	codeOutcomeUnknown          = "outcome-unknown"
	codeProviderUnavailable     = "provider-unavailable"
	codeServiceUnavailable      = "service-unavailable"
	codeOrderNotFound           = "order-not-found"
	codeOrderMismatch           = "order-mismatch"
	codePaymentNotFound         = "payment-not-found"
	codePaymentNotRefundable    = "payment-not-refundable"
	codeRefundExceedsPayment    = "refund-exceeds-payment"
	codeRefundDeclined          = "refund-declined"
	codeRefundFailed            = "refund-failed"
	codeExternalRefundConflict  = "external-refund-conflict"
	codePaymentNotAuthorized    = "payment-not-authorized"
	codeTransitionInProgress    = "payment-transition-in-progress"
	codeCaptureMismatch         = "capture-mismatch"
	codeCaptureDeclined         = "capture-declined"
	codeCaptureFailed           = "capture-failed"
	codeVoidDeclined            = "void-declined"
	codeVoidFailed              = "void-failed"
)

// gatewayCodePrefix starts the Code of an answer that was not the
// service's own problem+json ("http-502"): a proxy's or gateway's page.
const gatewayCodePrefix = "http-"

// Problem is an error answer of the service (RFC 9457 problem details).
type Problem struct {
	// Status is the HTTP status.
	Status int `json:"status"`
	// Code is the service's stable problem code, such as
	// "order-already-paid"; "http-<status>" for an answer that was not the
	// service's own (a gateway's page).
	Code string `json:"code"`
	// Title is a short human summary of the problem type.
	Title string `json:"title"`
	// Detail says what happened to this request and what to do next.
	Detail string `json:"detail"`
	// Errors names the invalid fields of a validation failure.
	Errors []FieldError `json:"errors"`
	// Payment is the declined or failed payment, on payment-declined and
	// payment-failed; the payment, still AUTHORIZED, on capture-declined,
	// capture-failed, void-declined and void-failed.
	Payment *Payment `json:"payment"`
	// Refund is the declined or failed refund, on refund-declined and
	// refund-failed.
	Refund *Refund `json:"refund"`
	// RetryAfter is the service's Retry-After, zero if it sent none.
	RetryAfter time.Duration `json:"-"`
}

// FieldError is one invalid request field.
type FieldError struct {
	// Field is the JSON name of the field, such as "amount".
	Field string `json:"field"`
	// Message says what is wrong with it.
	Message string `json:"message"`
}

func (p *Problem) Error() string {
	msg := fmt.Sprintf("payment-service: %d %s", p.Status, p.Code)
	if p.Detail != "" {
		msg += ": " + p.Detail
	}
	if len(p.Errors) > 0 {
		fields := make([]string, len(p.Errors))
		for i, e := range p.Errors {
			fields[i] = e.Field + " " + e.Message
		}
		msg += " (" + strings.Join(fields, "; ") + ")"
	}
	return msg
}

// errorOfCode is the Err* value of each problem code that has one. A
// validation failure and a wrong API key are matched by status instead
// (every 400 and 401 of the service).
var errorOfCode = map[string]error{
	codeDeclined:                ErrDeclined,
	codePaymentFailed:           ErrPaymentFailed,
	codeKeyReused:               ErrKeyReused,
	codeOrderAlreadyPaid:        ErrOrderAlreadyPaid,
	codeExternalPaymentConflict: ErrExternalPaymentConflict,
	codeOrderNotFound:           ErrOrderNotFound,
	codeOrderMismatch:           ErrOrderMismatch,
	codePaymentNotFound:         ErrPaymentNotFound,
	codePaymentNotRefundable:    ErrPaymentNotRefundable,
	codeRefundExceedsPayment:    ErrRefundExceedsPayment,
	codeRefundDeclined:          ErrRefundDeclined,
	codeRefundFailed:            ErrRefundFailed,
	codeExternalRefundConflict:  ErrExternalRefundConflict,
	codePaymentNotAuthorized:    ErrPaymentNotAuthorized,
	codeTransitionInProgress:    ErrTransitionInProgress,
	codeCaptureMismatch:         ErrCaptureMismatch,
	codeCaptureDeclined:         ErrCaptureDeclined,
	codeCaptureFailed:           ErrCaptureFailed,
	codeVoidDeclined:            ErrVoidDeclined,
	codeVoidFailed:              ErrVoidFailed,
}

// Is matches the Err* value of the problem's code.
func (p *Problem) Is(target error) bool {
	switch target {
	case ErrValidation:
		return p.Status == http.StatusBadRequest
	case ErrUnauthorized:
		return p.Status == http.StatusUnauthorized
	}
	err, ok := errorOfCode[p.Code]
	return ok && err == target
}

// DeclinedError is a declined charge: the payment as recorded (DECLINED).
type DeclinedError struct {
	// Payment is the declined payment.
	Payment Payment
	// Problem is the service's 402 answer.
	Problem *Problem
}

func (e *DeclinedError) Error() string {
	return fmt.Sprintf("payment-service: payment %d declined", e.Payment.ID)
}

// Is matches ErrDeclined.
func (e *DeclinedError) Is(target error) bool { return target == ErrDeclined }

// Unwrap returns the problem.
func (e *DeclinedError) Unwrap() error { return e.Problem }

// NoAnswerError is an attempt that got no answer: the connection failed,
// broke, or timed out. The request may have been processed.
type NoAnswerError struct {
	// Err is the transport's error.
	Err error
}

func (e *NoAnswerError) Error() string { return "payment-service: no answer: " + e.Err.Error() }

// Unwrap returns the transport's error.
func (e *NoAnswerError) Unwrap() error { return e.Err }

// GaveUpError is returned when a call of the client stopped retrying:
// the context ended, the next wait would outlast its deadline, or
// MaxAttempts were made.
type GaveUpError struct {
	// Attempts is how many requests were made.
	Attempts int
	// Last is the last attempt's error: a *NoAnswerError or a *Problem
	// (503, 409 request-in-progress or payment-transition-in-progress, or
	// a gateway's 500, 502 or 504).
	Last error
	// OutcomeUnknown is true when some attempt of a command (a charge, a
	// refund, a capture or a void) may have moved the money: it got no answer (also a gateway's answer
	// in place of the service's), or outcome-unknown, or
	// request-in-progress. Then the only safe next step is the same call,
	// with the same key, later. It is never true for a read (Refunds).
	OutcomeUnknown bool
	// Err is the context's error, if the context ended.
	Err error
}

func (e *GaveUpError) Error() string {
	msg := fmt.Sprintf("payment-service: gave up after %d attempts: %v", e.Attempts, e.Last)
	if e.OutcomeUnknown {
		msg += " (the money may have moved: retry later with the same idempotency key and request)"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches ErrOutcomeUnknown when the outcome is unknown.
func (e *GaveUpError) Is(target error) bool { return target == ErrOutcomeUnknown && e.OutcomeUnknown }

// Unwrap returns the last attempt's error and the context's.
func (e *GaveUpError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Last}
	}
	return []error{e.Last, e.Err}
}

// retryable reports an error after which the same request may succeed and
// cannot move money twice (the key guards it): no answer, 503, 409 in
// progress, and a gateway's answer in place of the service's
// (fromGateway). It is the same for every command: the service documents
// the same retryable answers for all (api/openapi.yaml), and every
// refund-specific problem is final. A capture and a void add 409
// payment-transition-in-progress: nothing is stored for the key, the
// service sends a Retry-After, and the other capture or void ends soon.
func retryable(err error) bool {
	var noAnswer *NoAnswerError
	if errors.As(err, &noAnswer) {
		return true
	}
	var p *Problem
	if !errors.As(err, &p) {
		return false
	}
	return p.Status == http.StatusServiceUnavailable ||
		p.Status == http.StatusConflict && (p.Code == codeRequestInProgress || p.Code == codeTransitionInProgress) ||
		p.fromGateway()
}

// fromGateway reports an answer that a load balancer or proxy gave in the
// service's place: it forwarded the request, or tried to, and got no
// answer it could pass on, so the service may have charged or refunded.
// 502 and 504
// are never the service's own; a 500 or 503 is a gateway's when its body
// is not the service's problem+json. The service's own 500 is not retried:
// it is a bug to look at, not a lost answer.
func (p *Problem) fromGateway() bool {
	switch p.Status {
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true
	case http.StatusInternalServerError, http.StatusServiceUnavailable:
		return strings.HasPrefix(p.Code, gatewayCodePrefix)
	}
	return false
}

// mayHaveMovedMoney reports a retryable error after which the command may
// have been made: everything but the service's two 503s that say the
// provider did not move the money (service-unavailable: the provider was
// not called; provider-unavailable: the provider said it did not charge
// or refund), and payment-transition-in-progress (this key's capture or
// void never started: another one holds the payment). A gateway's answer
// is no answer: the service behind it may have moved the money.
func mayHaveMovedMoney(err error) bool {
	var p *Problem
	if errors.As(err, &p) && !p.fromGateway() {
		return p.Code != codeServiceUnavailable && p.Code != codeProviderUnavailable && p.Code != codeTransitionInProgress
	}
	return true
}
