package http

import (
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

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
