package http

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// orderResponse is an order as the projection holds it.
type orderResponse struct {
	OrderID    int64   `json:"orderId"`
	CustomerID int64   `json:"customerId"`
	Amount     string  `json:"amount"`
	Currency   string  `json:"currency"`
	SagaID     *string `json:"sagaId,omitempty"`
	// LastEventID and LastEventAt name the event the row was last written
	// from; absent for rows no event wrote.
	LastEventID *string    `json:"lastEventId,omitempty"`
	LastEventAt *time.Time `json:"lastEventAt,omitempty"`
	UpdatedAt   time.Time  `json:"updatedAt"`
}

// orderHandlers serves /orders.
type orderHandlers struct {
	get *app.GetOrder
}

// getOrder handles GET /orders/:orderId.
func (h *orderHandlers) getOrder(c echo.Context) error {
	id, err := positiveIDParam(c, "orderId")
	if err != nil {
		return err
	}
	p, err := h.get.Handle(c.Request().Context(), clientID(c), domain.OrderID(id))
	if errors.Is(err, domain.ErrOrderNotFound) {
		return orderNotFound()
	}
	if err != nil {
		return err
	}
	resp := orderResponse{
		OrderID:    int64(p.Order.ID),
		CustomerID: int64(p.Order.CustomerID),
		Amount:     p.Order.Total.AmountString(),
		Currency:   string(p.Order.Total.Currency()),
		UpdatedAt:  p.UpdatedAt,
	}
	if p.SagaID.Valid {
		s := p.SagaID.UUID.String()
		resp.SagaID = &s
	}
	if p.LastEvent != nil {
		id, at := p.LastEvent.EventID.String(), p.LastEvent.OccurredAt.UTC()
		resp.LastEventID, resp.LastEventAt = &id, &at
	}
	return c.JSON(http.StatusOK, resp)
}
