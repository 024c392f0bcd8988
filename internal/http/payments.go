package http

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// chargeOperation is the endpoint's name in the command hash.
const chargeOperation = "POST /payments"

// chargeRequest is the JSON body of POST /payments. Pointers tell a
// missing field from a zero one, so "required" can name it.
type chargeRequest struct {
	OrderID           *int64  `json:"orderId" validate:"required,gt=0"`
	CustomerID        *int64  `json:"customerId" validate:"required,gt=0"`
	Amount            *string `json:"amount" validate:"required,amount"`
	Currency          *string `json:"currency" validate:"required,iso4217"`
	PaymentProvider   *string `json:"paymentProvider" validate:"required,provider"`
	ExternalPaymentID *string `json:"externalPaymentId" validate:"required,min=1,max=128,printascii"`
	// CaptureMethod manual authorizes: the provider holds the amount for
	// a capture or a void; automatic (the default) charges at once.
	CaptureMethod *string `json:"captureMethod" validate:"omitempty,oneof=automatic manual"`
	// PaymentMethod is what the customer pays with, as the provider names
	// it (Stripe's pm_...); the sandbox takes none and ignores it.
	PaymentMethod *string `json:"paymentMethod" validate:"omitempty,paymentmethod"`
}

// paymentResponse is a payment as the API shows it.
type paymentResponse struct {
	ID                int64     `json:"id"`
	OrderID           int64     `json:"orderId"`
	CustomerID        int64     `json:"customerId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	PaymentProvider   string    `json:"paymentProvider"`
	ExternalPaymentID string    `json:"externalPaymentId"`
	Status            string    `json:"status"`
	CreatedAt         time.Time `json:"createdAt"`
	// CaptureMethod is shown for a two-step payment only, and
	// CapturedAmount once it is captured: a one-step charge's answer is as
	// it always was, byte for byte.
	CaptureMethod  string `json:"captureMethod,omitempty"`
	CapturedAmount string `json:"capturedAmount,omitempty"`
}

func toPaymentResponse(p domain.Payment) *paymentResponse {
	r := paymentResponse{
		ID:                int64(p.ID),
		OrderID:           int64(p.Charge.OrderID),
		CustomerID:        int64(p.Charge.CustomerID),
		Amount:            p.Charge.Amount.AmountString(),
		Currency:          string(p.Charge.Amount.Currency()),
		PaymentProvider:   string(p.Charge.Provider),
		ExternalPaymentID: string(p.Charge.ExternalPaymentID),
		Status:            string(p.Status),
		CreatedAt:         p.CreatedAt.UTC(),
	}
	if p.Charge.Manual() {
		r.CaptureMethod = string(domain.CaptureManual)
	}
	if p.Captured != nil {
		r.CapturedAmount = p.Captured.AmountString()
	}
	return &r
}

// paymentHandlers serves /payments.
type paymentHandlers struct {
	charge   *app.ChargePayment
	get      *app.GetPayment
	validate *validator.Validate
	metrics  *metrics
}

// chargePayment handles POST /payments. Everything that can be wrong with
// the request is checked before the use case runs, so a bad request stores
// nothing and the client can fix it and retry with the same key.
func (h *paymentHandlers) chargePayment(c echo.Context) error {
	req := c.Request()
	key, err := commandHeaders(req)
	if err != nil {
		return err
	}
	charge, err := h.decodeCharge(c)
	if err != nil {
		return err
	}

	result, err := h.charge.Handle(req.Context(), app.ChargeCommand{
		Scope:     app.IdempotencyScope{ClientID: clientID(c), Key: key},
		Charge:    charge,
		Operation: chargeOperation,
	})
	return h.respond(c, result, err)
}

// getPayment handles GET /payments/:id.
func (h *paymentHandlers) getPayment(c echo.Context) error {
	id, err := positiveIDParam(c, "id")
	if err != nil {
		return err
	}
	p, err := h.get.Handle(c.Request().Context(), clientID(c), domain.PaymentID(id))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toPaymentResponse(p))
}

// decodeCharge reads, decodes and validates the body into a domain charge.
func (h *paymentHandlers) decodeCharge(c echo.Context) (domain.Charge, error) {
	body, err := readBody(c)
	if err != nil {
		return domain.Charge{}, err
	}

	req, ok := decodeWellFormedCharge(body)
	if !ok {
		req, err = decodeReportingEverything[chargeRequest](h, body)
		if err != nil {
			return domain.Charge{}, err
		}
		return chargeOf(req)
	}
	if errs := h.validateFields(&req, nil); len(errs) > 0 {
		return domain.Charge{}, validationProblem(errs)
	}
	return chargeOf(req)
}

// decodeWellFormedCharge reads a body that is what a client should send:
// one object whose member names are the request's fields, each at most
// once, spelled exactly, with values json.Unmarshal takes for their types.
// Anything else (a repeated, unknown or escaped name, a wrong type, bad
// syntax, trailing data) makes it give up, and the thorough decoder names
// every problem. Unknown names and nested values end here, so a name can
// only repeat at the top level, and that is the one level it checks.
func decodeWellFormedCharge(body []byte) (chargeRequest, bool) {
	var req chargeRequest
	if !namesKnownAndOnce(body) {
		return req, false
	}
	// Unmarshal matches names without regard to case; namesKnownAndOnce
	// has already checked them exactly. It refuses trailing data.
	if err := json.Unmarshal(body, &req); err != nil {
		return req, false
	}
	return req, true
}

// chargeFields are the member names of a charge body, exactly as sent.
var chargeFields = [...]string{"orderId", "customerId", "amount", "currency", "paymentProvider", "externalPaymentId", "captureMethod", "paymentMethod"}

// namesKnownAndOnce scans body's top-level object for its member names and
// reports whether each is one of chargeFields, spelled exactly and without
// escapes, and none repeats. It trusts json.Unmarshal to check the syntax:
// on malformed input its answer does not matter, since Unmarshal fails.
func namesKnownAndOnce(body []byte) bool {
	var seen [len(chargeFields)]bool
	depth, inString, inName, expectName := 0, false, false, false
	start := 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				if inName {
					return false // an escaped name: the thorough decoder compares it unescaped
				}
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
				if inName {
					k := fieldIndex(body[start:i])
					if k < 0 || seen[k] {
						return false
					}
					seen[k] = true
				}
			}
			continue
		}
		switch c {
		case '"':
			inString, inName, start = true, depth == 1 && expectName, i+1
			expectName = false
		case '{':
			depth++
			expectName = depth == 1
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			expectName = depth == 1
		}
	}
	return true
}

func fieldIndex(name []byte) int {
	for k, f := range chargeFields {
		if string(name) == f {
			return k
		}
	}
	return -1
}

// chargeOf builds the domain charge from a validated request.
func chargeOf(req chargeRequest) (domain.Charge, error) {
	// The validator has checked every field, so these constructors cannot
	// fail; their errors are still returned, never ignored.
	amount, err := decimal.NewFromString(*req.Amount)
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	money, err := domain.NewMoney(amount, domain.Currency(*req.Currency))
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "amount", Message: err.Error()}})
	}
	charge, err := domain.NewCharge(domain.OrderID(*req.OrderID), domain.CustomerID(*req.CustomerID), money,
		domain.ProviderName(*req.PaymentProvider), domain.ExternalPaymentID(*req.ExternalPaymentID))
	if err != nil {
		return domain.Charge{}, validationProblem([]FieldError{{Field: "body", Message: err.Error()}})
	}
	if req.CaptureMethod != nil && *req.CaptureMethod == string(domain.CaptureManual) {
		charge.CaptureMethod = domain.CaptureManual
	}
	if req.PaymentMethod != nil {
		charge.PaymentMethod = *req.PaymentMethod
	}
	return charge, nil
}

// EncodeChargeOutcome renders a charge's outcome.
func (ResponseEncoder) EncodeChargeOutcome(_ app.IdempotencyScope, o app.ChargeOutcome) (app.StoredResponse, error) {
	var status int
	var body any
	switch o.Kind {
	case app.ChargeSucceeded:
		status, body = http.StatusCreated, toPaymentResponse(o.Payment)
	case app.ChargeAlreadyRecorded:
		status, body = http.StatusOK, toPaymentResponse(o.Payment)
	case app.ChargeDeclined:
		p := newProblem(http.StatusPaymentRequired, codePaymentDeclined, "Payment declined",
			"The payment provider declined the charge. The declined payment is recorded.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.ChargeFailed:
		// 402 like a decline: not paid, for good, and the payment is
		// recorded; the code tells a refused request from a declined charge.
		p := newProblem(http.StatusPaymentRequired, codePaymentFailed, "Payment failed",
			"The payment provider refused the charge request for good and holds no charge for it: nothing was charged. The failed payment is recorded; a new attempt needs a new externalPaymentId.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.ChargeExternalPaymentConflict:
		// The same bytes whether the id is the client's own payment for
		// another charge or another client's payment: nothing of that
		// payment, nor whose it is (docs/design.md, "Per-client scope").
		p := newProblem(http.StatusConflict, codeExternalPaymentConflict, "External payment conflict",
			"This externalPaymentId cannot be used for this charge. Nothing was charged; check the id (a new idempotency key gets the same answer).")
		status, body = p.Status, p
	case app.ChargeOrderAlreadyPaid:
		p := newProblem(http.StatusConflict, codeOrderAlreadyPaid, "Order already paid",
			"This order is already paid under another external payment. Nothing was charged.")
		status, body = p.Status, p
	default:
		return app.StoredResponse{}, errUnknownOutcome("charge", int(o.Kind))
	}
	return storedResponse("charge", status, body)
}
