package http

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The captures and voids of a payment: their requests, their answers.

// captureRequest is the JSON body of POST /payments/{id}/captures.
type captureRequest struct {
	Amount            *string `json:"amount" validate:"required,amount"`
	Currency          *string `json:"currency" validate:"required,iso4217"`
	ExternalCaptureID *string `json:"externalCaptureId" validate:"required,min=1,max=128,printascii"`
}

// transitionHandlers serves the captures and voids of a payment.
type transitionHandlers struct {
	*paymentHandlers
	capture *app.PaymentTransition
	void    *app.PaymentTransition
}

// capturePayment handles POST /payments/{id}/captures: every bad input is
// a problem before the use case runs, and stores nothing.
func (h *transitionHandlers) capturePayment(c echo.Context) error {
	key, id, body, err := h.transitionRequest(c, false)
	if err != nil {
		return err
	}
	r, err := decodeReportingEverything[captureRequest](h.paymentHandlers, body)
	if err != nil {
		return err
	}
	amount, err := decimal.NewFromString(*r.Amount)
	if err != nil { // the validator checked it; never ignored all the same
		return validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	result, err := h.capture.Handle(c.Request().Context(), app.TransitionCommand{
		Scope: app.IdempotencyScope{ClientID: clientID(c), Key: key}, PaymentID: domain.PaymentID(id),
		Amount: amount, Currency: domain.Currency(*r.Currency), Reference: *r.ExternalCaptureID,
		Operation: app.OperationCapturePayment,
	})
	return h.respond(c, result, err)
}

// transitionRequest reads what a capture and a void take alike: the
// command's headers, the payment's id and the body. A body that may be
// left out (a void's: the spec does not require it) may come without a
// Content-Type, since there is nothing to declare; a body that is there
// must still be declared application/json.
func (h *transitionHandlers) transitionRequest(c echo.Context, bodyOptional bool) (key string, id int64, body []byte, err error) {
	req := c.Request()
	undeclared := bodyOptional && req.Header.Get(echo.HeaderContentType) == ""
	if undeclared {
		key, err = idempotencyKey(req.Header)
	} else {
		key, err = commandHeaders(req)
	}
	if err != nil {
		return "", 0, nil, err
	}
	if id, err = positiveIDParam(c, "id"); err != nil {
		return "", 0, nil, err
	}
	if body, err = readBody(c); err != nil {
		return "", 0, nil, err
	}
	if undeclared && len(body) > 0 {
		return "", 0, nil, jsonContent(req)
	}
	return key, id, body, nil
}

// voidRequest is the JSON body of POST /payments/{id}/voids: an empty
// object (or no body at all); a void says nothing but which payment.
type voidRequest struct{}

// voidPayment handles POST /payments/{id}/voids.
func (h *transitionHandlers) voidPayment(c echo.Context) error {
	key, id, body, err := h.transitionRequest(c, true)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		body = []byte("{}")
	}
	if _, err := decodeReportingEverything[voidRequest](h.paymentHandlers, body); err != nil {
		return err
	}
	result, err := h.void.Handle(c.Request().Context(), app.TransitionCommand{
		Scope: app.IdempotencyScope{ClientID: clientID(c), Key: key}, PaymentID: domain.PaymentID(id),
		Operation: app.OperationVoidPayment,
	})
	return h.respond(c, result, err)
}

// The answers of a capture and a void, and the problems of a payment that
// holds nothing to move.

// EncodeTransitionOutcome renders a capture's or a void's outcome: the
// payment as it stands after it, or the problem with the payment; a
// receipt, the pending capture or void itself (received.go).
func (ResponseEncoder) EncodeTransitionOutcome(_ app.IdempotencyScope, o app.TransitionOutcome) (app.StoredResponse, error) {
	noun := string(o.Transition.Kind)
	var status int
	var body any
	switch o.Kind {
	case app.TransitionSucceeded:
		status, body = http.StatusCreated, toPaymentResponse(o.Payment)
	case app.TransitionDeclined:
		p := newProblem(http.StatusUnprocessableEntity, noun+"-declined", "The "+noun+" was declined",
			"The payment provider declined the "+noun+". The payment is still AUTHORIZED; a new attempt needs a new idempotency key"+
				captureReferenceHint(o)+".")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.TransitionFailed:
		p := newProblem(http.StatusUnprocessableEntity, noun+"-failed", "The "+noun+" failed",
			"The payment provider refused the "+noun+" for good, or failed it (the hold may have lapsed, or been moved on already): nothing was "+
				map[bool]string{true: "captured", false: "voided"}[noun == "capture"]+". The payment stays AUTHORIZED until the provider says more.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.TransitionReceived:
		// The provider decides later: the pending capture or void, which
		// holds the payment AUTHORIZED meanwhile.
		status, body = http.StatusAccepted, toTransitionResponse(o.Transition)
	default:
		return app.StoredResponse{}, errUnknownOutcome(noun, int(o.Kind))
	}
	return storedResponse(noun, status, body)
}

func captureReferenceHint(o app.TransitionOutcome) string {
	if o.Transition.Reference == "" {
		return ""
	}
	return " and a new externalCaptureId"
}

// transitionProblem is the problem of a capture or void that stored
// nothing, or nil for an error that is not one of theirs.
func transitionProblem(err error) *Problem {
	var state *app.PaymentStateError
	switch {
	case errors.As(err, &state) && !state.Manual:
		return newProblem(http.StatusConflict, codePaymentNotAuthorized, "Payment not authorized",
			"The payment was charged in one step ("+string(state.Status)+"): there is no hold to capture or void. Nothing was stored for this key.")
	case errors.As(err, &state):
		return newProblem(http.StatusConflict, codePaymentNotAuthorized, "Payment not authorized",
			"The payment is "+string(state.Status)+", not AUTHORIZED: its hold was moved on already, or is not decided yet. Nothing was stored for this key.")
	case errors.Is(err, app.ErrTransitionInProgress):
		p := newProblem(http.StatusConflict, codeTransitionInProgress, "Capture or void in progress",
			"Another capture or void of the payment is being made. Nothing was stored for this key: if that one is declined, retry with it.")
		p.retryAfter = retryAfterDefault
		return p
	}
	return nil
}
