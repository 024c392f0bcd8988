package http

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/example/payment-service/internal/app"
)

// ResponseEncoder renders charge outcomes into the exact responses that are
// stored with the idempotency key and replayed byte for byte. It implements
// app.ResponseEncoder. Bodies hold nothing request-specific (no request id,
// no time of the reply), so the stored bytes are right for every replay.
type ResponseEncoder struct{}

// EncodeChargeOutcome implements app.ResponseEncoder.
func (ResponseEncoder) EncodeChargeOutcome(o app.ChargeOutcome) (app.StoredResponse, error) {
	var status int
	var body any
	switch o.Kind {
	case app.OutcomeCharged:
		status, body = http.StatusCreated, toPaymentResponse(o.Payment)
	case app.OutcomeAlreadyRecorded:
		status, body = http.StatusOK, toPaymentResponse(o.Payment)
	case app.OutcomeDeclined:
		p := newProblem(http.StatusPaymentRequired, codePaymentDeclined, "Payment declined",
			"The payment provider declined the charge. The declined payment is recorded.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.OutcomeFailed:
		// 402 like a decline: not paid, for good, and the payment is
		// recorded; the code tells a refused request from a declined charge.
		p := newProblem(http.StatusPaymentRequired, codePaymentFailed, "Payment failed",
			"The payment provider refused the charge request for good and holds no charge for it: nothing was charged. The failed payment is recorded; a new attempt needs a new externalPaymentId.")
		p.Payment = toPaymentResponse(o.Payment)
		status, body = p.Status, p
	case app.OutcomeExternalPaymentConflict:
		// The same bytes whether the id is the client's own payment for
		// another charge or another client's payment: nothing of that
		// payment, nor whose it is (docs/design.md, "Per-client scope").
		p := newProblem(http.StatusConflict, codeExternalPaymentConflict, "External payment conflict",
			"This externalPaymentId cannot be used for this charge. Nothing was charged; check the id (a new idempotency key gets the same answer).")
		status, body = p.Status, p
	case app.OutcomeOrderAlreadyPaid:
		p := newProblem(http.StatusConflict, codeOrderAlreadyPaid, "Order already paid",
			"This order is already paid under another external payment. Nothing was charged.")
		status, body = p.Status, p
	default:
		return app.StoredResponse{}, errUnknownOutcome("charge", int(o.Kind))
	}
	return storedResponse("charge", status, body)
}

// errUnknownOutcome: an outcome kind the encoder does not know.
func errUnknownOutcome(command string, kind int) error {
	return fmt.Errorf("encode %s outcome: unknown kind %d", command, kind)
}

// storedResponse renders body as the stored response with status.
func storedResponse(command string, status int, body any) (app.StoredResponse, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return app.StoredResponse{}, fmt.Errorf("encode %s outcome: %w", command, err)
	}
	return app.StoredResponse{StatusCode: status, Body: b}, nil
}

var (
	_ app.ResponseEncoder       = ResponseEncoder{}
	_ app.RefundResponseEncoder = ResponseEncoder{}
)
