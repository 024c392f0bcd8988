package http

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Problem is an RFC 9457 problem details object. Code repeats the last
// segment of Type, for clients that prefer a short stable string.
type Problem struct {
	// Type is the problem type's URI: problemTypeBase plus Code.
	Type string `json:"type"`
	// Title is a short summary that does not change between occurrences.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail says what happened this time and what the client should do.
	Detail string `json:"detail,omitempty"`
	// Code is the stable code clients switch on (api/openapi.yaml).
	Code string `json:"code"`
	// Errors names each invalid field of a validation-failed problem.
	Errors []FieldError `json:"errors,omitempty"`
	// Payment is set on payment-declined: the declined payment as recorded.
	Payment *paymentResponse `json:"payment,omitempty"`
	// Refund is set on refund-declined and refund-failed: the refund as
	// recorded.
	Refund *refundResponse `json:"refund,omitempty"`

	retryAfter time.Duration // sent as the Retry-After header
}

// FieldError names one invalid request field.
type FieldError struct {
	// Field is the field's path in the request, such as "amount".
	Field string `json:"field"`
	// Message says what is wrong with it.
	Message string `json:"message"`
}

// problemTypeBase prefixes every problem type URI. The URIs are
// identifiers: clients compare them, and stored answers replayed byte for
// byte hold them, so they stay as they are although they do not resolve.
// What resolves is each problem's Link to problemDocsPath (decision 0020).
const problemTypeBase = "https://payment-service.example/problems/"

// problemDocsPath is the page the service serves that documents every
// problem code, each under an anchor named by the code.
const problemDocsPath = "/problems"

// linkProblemDocs points a problem response at its code's entry on the
// problem page, as draft-ietf-httpapi-idempotency-key-header-07 (section
// 2.7) asks of the idempotency errors: `Link: </problems#code>;
// rel="describedby"`. The target is relative, so it resolves against
// whatever host and scheme the client reached the service by.
func linkProblemDocs(h http.Header, code string) {
	h.Set("Link", "<"+problemDocsPath+"#"+code+`>; rel="describedby"; type="text/html"`)
}

// Problem codes. They are part of the API contract (api/openapi.yaml).
const (
	codeUnauthorized            = "unauthorized"
	codeIdempotencyKeyMissing   = "idempotency-key-missing"
	codeIdempotencyKeyInvalid   = "idempotency-key-invalid"
	codeValidationFailed        = "validation-failed"
	codeMalformedJSON           = "malformed-json"
	codeUnsupportedMediaType    = "unsupported-media-type"
	codePayloadTooLarge         = "payload-too-large"
	codeNotFound                = "not-found"
	codeMethodNotAllowed        = "method-not-allowed"
	codePaymentNotFound         = "payment-not-found"
	codeModificationNotFound    = "modification-not-found"
	codeIdempotencyKeyReused    = "idempotency-key-reused"
	codeRequestInProgress       = "request-in-progress"
	codeOrderNotFound           = "order-not-found"
	codeOrderMismatch           = "order-mismatch"
	codePaymentDeclined         = "payment-declined"
	codePaymentFailed           = "payment-failed"
	codeExternalPaymentConflict = "external-payment-conflict"
	codeProviderUnavailable     = "provider-unavailable"
	codeOutcomeUnknown          = "outcome-unknown"
	codeOrderAlreadyPaid        = "order-already-paid"
	codePaymentNotRefundable    = "payment-not-refundable"
	codeRefundExceedsPayment    = "refund-exceeds-payment"
	codeRefundDeclined          = "refund-declined"
	codeRefundFailed            = "refund-failed"
	codeExternalRefundConflict  = "external-refund-conflict"
	codePaymentNotAuthorized    = "payment-not-authorized"
	codeTransitionInProgress    = "payment-transition-in-progress"
	codeCaptureMismatch         = "capture-mismatch"
	codeAmountNotInMinorUnits   = "amount-not-in-minor-units"
	codeServiceUnavailable      = "service-unavailable"
	codeWebhooksNotConfigured   = "webhooks-not-configured"
	codeWebhooksNotOffered      = "webhooks-not-offered"
	codeProviderNotOffered      = "provider-not-offered"
	codeWebhookSignatureInvalid = "webhook-signature-invalid"
	codeWebhookEventInvalid     = "webhook-event-invalid"
	codeWebhookObjectUnknown    = "webhook-object-unknown"
	codeForbidden               = "forbidden"
	codeRunNotFound             = "reconciliation-run-not-found"
	codeInternal                = "internal-error"
)

func newProblem(status int, code, title, detail string) *Problem {
	return &Problem{Type: problemTypeBase + code, Title: title, Status: status, Detail: detail, Code: code}
}

// Error returns the code and the detail, for logs.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// retryAfterDefault is what a client is told to wait after a 503.
const retryAfterDefault = 2 * time.Second

// problemFor maps every error a handler can return to a problem, in one
// place. Unknown errors are 500 with no detail (the log has it).
func problemFor(err error) *Problem {
	var p *Problem
	var inProgress *app.InProgressError
	var outcomeUnknown *app.OutcomeUnknownError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &outcomeUnknown):
		// Checked before ErrStoreUnavailable, which it may wrap: once the
		// provider has been called, "nothing was charged" is not known.
		p = newProblem(http.StatusServiceUnavailable, codeOutcomeUnknown, "Outcome unknown",
			"The payment provider was asked to move the money (a charge or a refund) and its answer is not known yet: it may have gone through. "+
				"Retry with the same Idempotency-Key and the same body to get the final answer. "+
				"Never retry with a new key, a new externalPaymentId or a new externalRefundId: that could move the money twice.")
		p.retryAfter = outcomeUnknown.RetryAfter
		return p
	case errors.As(err, &inProgress):
		p = newProblem(http.StatusConflict, codeRequestInProgress, "Request in progress",
			"A request with this idempotency key (or for this external payment) is being processed. Retry later with the same key.")
		p.retryAfter = inProgress.RetryAfter
		return p
	case errors.Is(err, app.ErrKeyReused):
		return newProblem(http.StatusConflict, codeIdempotencyKeyReused, "Idempotency key reused",
			"This idempotency key was already used for a different request. Use a new key for a new operation.")
	case errors.Is(err, domain.ErrOrderNotFound):
		return newProblem(http.StatusUnprocessableEntity, codeOrderNotFound, "Order not found",
			"The order is not known to the payment service (yet). Retry with the same key once the order exists.")
	case errors.Is(err, domain.ErrOrderMismatch):
		return newProblem(http.StatusUnprocessableEntity, codeOrderMismatch, "Payment does not match the order",
			"The customer, amount or currency differ from the order's.")
	case errors.Is(err, domain.ErrPaymentNotFound):
		return newProblem(http.StatusNotFound, codePaymentNotFound, "Payment not found", "")
	case errors.Is(err, app.ErrModificationNotFound):
		return newProblem(http.StatusNotFound, codeModificationNotFound, "Capture, void or refund not found",
			"The payment has no capture, void or refund with this id (here, of this kind).")
	case transitionProblem(err) != nil:
		return transitionProblem(err)
	case errors.Is(err, domain.ErrCaptureMismatch):
		return newProblem(http.StatusConflict, codeCaptureMismatch, "Capture does not match the authorization",
			"A capture takes at most the authorized amount, in its currency: "+err.Error()+". Nothing was stored for this key.")
	case errors.Is(err, app.ErrPaymentNotRefundable):
		return newProblem(http.StatusConflict, codePaymentNotRefundable, "Payment not refundable",
			"Only a SUCCEEDED payment can be refunded. Nothing was stored for this key: retry with it once the payment has succeeded.")
	case errors.Is(err, app.ErrRefundExceedsPayment):
		return newProblem(http.StatusConflict, codeRefundExceedsPayment, "Refund exceeds the payment",
			"The refund would take the payment's refunds beyond its amount (refunds in progress count). Nothing was stored for this key: a refund in progress may still be declined, and then the same request succeeds.")
	case errors.Is(err, app.ErrAmountNotInMinorUnits):
		return newProblem(http.StatusUnprocessableEntity, codeAmountNotInMinorUnits, "Amount not in the currency's minor units",
			"The payment provider counts in each currency's minor units (cents; none for JPY, three digits for KWD), and "+err.Error()+
				" has more fraction digits than that: it is never rounded. Nothing was stored or sent; fix the amount and retry with the same key.")
	case errors.Is(err, app.ErrUnknownProvider):
		return newProblem(http.StatusUnprocessableEntity, codeProviderNotOffered, "Payment provider not offered",
			"This service does not charge through the payment provider the charge names (it charges through the one its configuration names). Nothing was stored or sent for this key.")
	case errors.Is(err, app.ErrNoTwoStepPayments):
		return validationProblem([]FieldError{{Field: "captureMethod", Message: "the payment provider takes no two-step payments"}})
	case errors.Is(err, app.ErrProviderUnavailable):
		p = newProblem(http.StatusServiceUnavailable, codeProviderUnavailable, "Payment provider unavailable",
			"The payment provider did not move the money (no charge or refund was made): it said so, or the request never reached it. Nothing was recorded for this key; retry with the same key.")
		p.retryAfter = retryAfterDefault
		return p
	case errors.Is(err, app.ErrStoreUnavailable):
		p = newProblem(http.StatusServiceUnavailable, codeServiceUnavailable, "Service unavailable",
			"The database cannot be reached, so this request did not reach the payment provider. Retry later (a charge with the same Idempotency-Key and body).")
		p.retryAfter = retryAfterDefault
		return p
	case errors.As(err, &he):
		return problemForEcho(he)
	default:
		return newProblem(http.StatusInternalServerError, codeInternal, "Internal error", "")
	}
}

func problemForEcho(he *echo.HTTPError) *Problem {
	switch he.Code {
	case http.StatusNotFound:
		return newProblem(http.StatusNotFound, codeNotFound, "Not found", "No such resource.")
	case http.StatusMethodNotAllowed:
		return newProblem(http.StatusMethodNotAllowed, codeMethodNotAllowed, "Method not allowed", "")
	case http.StatusRequestEntityTooLarge:
		return payloadTooLarge()
	case http.StatusUnauthorized:
		return unauthorized()
	default:
		return newProblem(he.Code, "http-"+strconv.Itoa(he.Code), http.StatusText(he.Code), "")
	}
}

// orderNotFound is GET /orders/{orderId}'s 404. The same error on a charge
// is 422 (problemFor): there the order is a precondition, here the resource.
func orderNotFound() *Problem {
	return newProblem(http.StatusNotFound, codeOrderNotFound, "Order not found",
		"No such order for this client: a client sees an order once it has a payment for it, and the order-projection consumer must have seen its OrderCreated event.")
}

func validationProblem(errs []FieldError) *Problem {
	p := newProblem(http.StatusBadRequest, codeValidationFailed, "Validation failed",
		"One or more fields are invalid. Nothing was stored; fix them and retry with the same key.")
	p.Errors = errs
	return p
}

func unauthorized() *Problem {
	return newProblem(http.StatusUnauthorized, codeUnauthorized, "Unauthorized",
		"Send a valid API key as `Authorization: Bearer <key>`.")
}

func payloadTooLarge() *Problem {
	return newProblem(http.StatusRequestEntityTooLarge, codePayloadTooLarge, "Payload too large",
		"The request body exceeds 64 KiB.")
}

// problemBody renders a problem. Problems are plain structs: Marshal
// cannot fail.
func problemBody(p *Problem) []byte {
	b, _ := json.Marshal(p)
	return b
}

const contentTypeProblem = "application/problem+json"

// errorHandler is echo's HTTPErrorHandler: every error any route or
// middleware returns leaves as problem+json.
func errorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		p := problemFor(err)
		if p.Status >= 500 {
			logger.ErrorContext(c.Request().Context(), "request failed",
				"request_id", c.Response().Header().Get(echo.HeaderXRequestID), "code", p.Code, "err", err)
		}
		if p.retryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(p.retryAfter.Seconds()))))
		}
		linkProblemDocs(c.Response().Header(), p.Code)
		if p.Status == http.StatusUnauthorized {
			// Beside a challenge the route set (the page's Basic).
			c.Response().Header().Add(echo.HeaderWWWAuthenticate, `Bearer realm="payment-service"`)
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(p.Status)
			return
		}
		_ = c.Blob(p.Status, contentTypeProblem, problemBody(p))
	}
}
