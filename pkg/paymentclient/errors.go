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
	// ErrOutcomeUnknown: Charge gave up while the charge may have been
	// made (a *GaveUpError). Call Charge again later with the same key and
	// request to learn the outcome; never with a new key.
	ErrOutcomeUnknown = errors.New("payment outcome unknown")
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
	// payment-failed.
	Payment *Payment `json:"payment"`
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

// Is matches the Err* value of the problem's code.
func (p *Problem) Is(target error) bool {
	switch target {
	case ErrDeclined:
		return p.Code == codeDeclined
	case ErrPaymentFailed:
		return p.Code == codePaymentFailed
	case ErrKeyReused:
		return p.Code == codeKeyReused
	case ErrOrderAlreadyPaid:
		return p.Code == codeOrderAlreadyPaid
	case ErrExternalPaymentConflict:
		return p.Code == codeExternalPaymentConflict
	case ErrValidation:
		return p.Status == http.StatusBadRequest
	case ErrUnauthorized:
		return p.Status == http.StatusUnauthorized
	case ErrOrderNotFound:
		return p.Code == codeOrderNotFound
	case ErrOrderMismatch:
		return p.Code == codeOrderMismatch
	}
	return false
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

// GaveUpError is returned when Charge stopped retrying: the context ended,
// the next wait would outlast its deadline, or MaxAttempts were made.
type GaveUpError struct {
	// Attempts is how many requests were made.
	Attempts int
	// Last is the last attempt's error: a *NoAnswerError or a *Problem
	// (503, 409 request-in-progress, or a gateway's 500, 502 or 504).
	Last error
	// OutcomeUnknown is true when some attempt may have charged: it got no
	// answer (also a gateway's answer in place of the service's), or
	// outcome-unknown, or request-in-progress. Then the only safe next
	// step is the same call, with the same key, later.
	OutcomeUnknown bool
	// Err is the context's error, if the context ended.
	Err error
}

func (e *GaveUpError) Error() string {
	msg := fmt.Sprintf("payment-service: gave up after %d attempts: %v", e.Attempts, e.Last)
	if e.OutcomeUnknown {
		msg += " (the charge may have been made: retry later with the same idempotency key and request)"
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
// cannot charge twice (the key guards it): no answer, 503, 409 in progress,
// and a gateway's answer in place of the service's (fromGateway).
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
		p.Status == http.StatusConflict && p.Code == codeRequestInProgress ||
		p.fromGateway()
}

// fromGateway reports an answer that a load balancer or proxy gave in the
// service's place: it forwarded the request, or tried to, and got no
// answer it could pass on, so the service may have charged. 502 and 504
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

// mayHaveCharged reports a retryable error after which the charge may have
// been made: everything but the service's two 503s that say the provider
// was not charged (service-unavailable: the provider was not called;
// provider-unavailable: the provider said it did not charge). A gateway's
// answer is no answer: the service behind it may have charged.
func mayHaveCharged(err error) bool {
	var p *Problem
	if errors.As(err, &p) && !p.fromGateway() {
		return p.Code != codeServiceUnavailable && p.Code != codeProviderUnavailable
	}
	return true
}
