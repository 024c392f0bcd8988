package http

import (
	"encoding/json"
	"net/http"
	"path"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// A capture, void or refund the provider received and decides later
// (app.ProviderAbilities.Modifications is AnswersReceived) is answered
// 202 Accepted: the pending resource (the capture, void or refund,
// PENDING) with a Location to read it at, stored as the key's answer and
// replayed byte for byte; the GET shows where it stands, SUCCEEDED,
// DECLINED or FAILED once the provider's event has settled it.

// transitionResponse is a capture or a void as the API shows it.
type transitionResponse struct {
	ID        int64  `json:"id"`
	PaymentID int64  `json:"paymentId"`
	Kind      string `json:"kind"`
	// Amount, Currency and ExternalCaptureID are a capture's.
	Amount            string `json:"amount,omitempty"`
	Currency          string `json:"currency,omitempty"`
	ExternalCaptureID string `json:"externalCaptureId,omitempty"`
	Status            string `json:"status"`
}

func toTransitionResponse(t domain.Transition) *transitionResponse {
	r := transitionResponse{ID: int64(t.ID), PaymentID: int64(t.PaymentID), Kind: string(t.Kind), Status: string(t.Status)}
	if t.Kind == domain.TransitionCapture {
		r.Amount, r.Currency, r.ExternalCaptureID = t.Amount.AmountString(), string(t.Amount.Currency()), t.Reference
	}
	return &r
}

// pendingLocation is where a 202's pending resource is read: under its
// payment, in the collection the command was posted to, by the ids its
// stored body names, so a replay names the place the first answer did.
func pendingLocation(c echo.Context, body []byte) string {
	var r struct {
		ID        int64 `json:"id"`
		PaymentID int64 `json:"paymentId"`
	}
	if json.Unmarshal(body, &r) != nil || r.ID == 0 || r.PaymentID == 0 {
		return ""
	}
	return "/payments/" + strconv.FormatInt(r.PaymentID, 10) + "/" + path.Base(c.Path()) + "/" + strconv.FormatInt(r.ID, 10)
}

// getTransition serves GET /payments/{id}/captures/{captureId} and
// /payments/{id}/voids/{voidId}, with t the capture or the void command.
func getTransition(t *app.PaymentTransition, param string) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := positiveIDParam(c, "id")
		if err != nil {
			return err
		}
		tid, err := positiveIDParam(c, param)
		if err != nil {
			return err
		}
		tr, err := t.Get(c.Request().Context(), clientID(c), domain.PaymentID(id), domain.TransitionID(tid))
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, toTransitionResponse(tr))
	}
}

// getRefund handles GET /payments/{id}/refunds/{refundId}.
func (h *refundHandlers) getRefund(c echo.Context) error {
	id, err := positiveIDParam(c, "id")
	if err != nil {
		return err
	}
	rid, err := positiveIDParam(c, "refundId")
	if err != nil {
		return err
	}
	r, err := h.list.Get(c.Request().Context(), clientID(c), domain.PaymentID(id), domain.RefundID(rid))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toRefundResponse(r))
}
