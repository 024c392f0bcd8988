package http

import (
	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

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
