package http

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// refundOperation is the endpoint's name in the command hash; the completer
// rebuilds refunds with the same string.
const refundOperation = app.OperationRefundPayment

// refundRequest is the JSON body of POST /payments/{id}/refunds. The
// currency is the payment's: the request has none of its own.
type refundRequest struct {
	Amount           *string `json:"amount" validate:"required,amount"`
	ExternalRefundID *string `json:"externalRefundId" validate:"required,min=1,max=128,printascii"`
}

// refundResponse is a refund as the API shows it.
type refundResponse struct {
	ID               int64  `json:"id"`
	PaymentID        int64  `json:"paymentId"`
	Amount           string `json:"amount"`
	Currency         string `json:"currency"`
	PaymentProvider  string `json:"paymentProvider"`
	ExternalRefundID string `json:"externalRefundId"`
	Status           string `json:"status"`
}

func toRefundResponse(r domain.Refund) *refundResponse {
	return &refundResponse{
		ID:               int64(r.ID),
		PaymentID:        int64(r.PaymentID),
		Amount:           r.Amount.AmountString(),
		Currency:         string(r.Amount.Currency()),
		PaymentProvider:  string(r.Provider),
		ExternalRefundID: string(r.ExternalRefundID),
		Status:           string(r.Status),
	}
}

// refundHandlers serves /payments/{id}/refunds.
type refundHandlers struct {
	*paymentHandlers
	refund *app.RefundPayment
	list   *app.ListRefunds
}

// refundPayment handles POST /payments/{id}/refunds. As for a charge, every
// bad input is a problem before the use case runs, and stores nothing.
func (h *refundHandlers) refundPayment(c echo.Context) error {
	req := c.Request()
	key, err := commandHeaders(req)
	if err != nil {
		return err
	}
	id, err := positiveIDParam(c, "id")
	if err != nil {
		return err
	}
	amount, external, err := h.decodeRefund(c)
	if err != nil {
		return err
	}
	result, err := h.refund.Handle(req.Context(), app.RefundCommand{
		Scope:            app.IdempotencyScope{ClientID: clientID(c), Key: key},
		PaymentID:        domain.PaymentID(id),
		Amount:           amount,
		ExternalRefundID: external,
		Operation:        refundOperation,
	})
	return h.respond(c, result, err)
}

// decodeRefund reads, decodes and validates the body. Every body goes
// through the thorough decoder: refunds are rare, and it names every
// problem (repeated, unknown and mistyped fields) in one answer.
func (h *paymentHandlers) decodeRefund(c echo.Context) (decimal.Decimal, domain.ExternalRefundID, error) {
	body, err := readBody(c)
	if err != nil {
		return decimal.Decimal{}, "", err
	}
	r, err := decodeReportingEverything[refundRequest](h, body)
	if err != nil {
		return decimal.Decimal{}, "", err
	}
	amount, err := decimal.NewFromString(*r.Amount)
	if err != nil { // the validator checked it; never ignored all the same
		return decimal.Decimal{}, "", validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	return amount, domain.ExternalRefundID(*r.ExternalRefundID), nil
}

// refundList is GET /payments/{id}/refunds's body.
type refundList struct {
	Refunds []*refundResponse `json:"refunds"`
}

// listRefunds handles GET /payments/{id}/refunds.
func (h *refundHandlers) listRefunds(c echo.Context) error {
	id, err := positiveIDParam(c, "id")
	if err != nil {
		return err
	}
	refunds, err := h.list.Handle(c.Request().Context(), clientID(c), domain.PaymentID(id))
	if err != nil {
		return err
	}
	out := refundList{Refunds: make([]*refundResponse, len(refunds))}
	for i, r := range refunds {
		out.Refunds[i] = toRefundResponse(r)
	}
	return c.JSON(http.StatusOK, out)
}

// EncodeRefundOutcome renders a refund's outcome: the exact bytes stored
// for its key, nothing request-specific in them.
func (ResponseEncoder) EncodeRefundOutcome(_ app.IdempotencyScope, o app.RefundOutcome) (app.StoredResponse, error) {
	var status int
	var body any
	switch o.Kind {
	case app.RefundSucceeded:
		status, body = http.StatusCreated, toRefundResponse(o.Refund)
	case app.RefundAlreadyRecorded:
		status, body = http.StatusOK, toRefundResponse(o.Refund)
	case app.RefundReceived:
		// The provider decides later: the pending refund, whose amount
		// counts meanwhile (received.go).
		status, body = http.StatusAccepted, toRefundResponse(o.Refund)
	case app.RefundDeclined:
		p := newProblem(http.StatusUnprocessableEntity, codeRefundDeclined, "Refund declined",
			"The payment provider declined the refund. The declined refund is recorded; its amount may be refunded again under a new externalRefundId.")
		p.Refund = toRefundResponse(o.Refund)
		status, body = p.Status, p
	case app.RefundFailed:
		p := newProblem(http.StatusUnprocessableEntity, codeRefundFailed, "Refund failed",
			"The payment provider refused the refund request for good and holds no refund for it: nothing was refunded. The failed refund is recorded; its amount may be refunded again under a new externalRefundId.")
		p.Refund = toRefundResponse(o.Refund)
		status, body = p.Status, p
	case app.RefundExternalRefundConflict:
		// The same bytes whatever the recorded refund is, and whoever's.
		p := newProblem(http.StatusConflict, codeExternalRefundConflict, "External refund conflict",
			"This externalRefundId cannot be used for this refund. Nothing was refunded; check the id (a new idempotency key gets the same answer).")
		status, body = p.Status, p
	default:
		return app.StoredResponse{}, errUnknownOutcome("refund", int(o.Kind))
	}
	return storedResponse("refund", status, body)
}
