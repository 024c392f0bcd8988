package http

import (
	"errors"
	"net/http"

	"github.com/example/payment-service/internal/app"
)

// What a capture's and a void's handlers share: their answers, and the
// problems of a payment that holds nothing to move.

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
