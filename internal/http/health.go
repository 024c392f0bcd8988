package http

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// Component is a background part of the service (the order consumer, the
// outbox relay) whose health is reported on /health but is no part of
// readiness: the payment API does not need it to serve.
type Component struct {
	// Name is the component as /health and payment_component_healthy name
	// it: "order-consumer", "outbox-relay".
	Name string
	// Health is nil while the component works; otherwise why it does not.
	Health func() error
}

// healthReport is /health's body: every part's state, for operators and
// monitoring. It is always 200 (this is a report, not a probe):
// "status" is ok when every part is, degraded otherwise.
//
// /health needs no key (a load balancer or a probe calls it), so it says
// which part fails and never why: an error's text can hold the database's
// user, name and host:port, or a broker's address. The why goes to the log.
type healthReport struct {
	Status     string            `json:"status"`
	Components []componentReport `json:"components"`
}

type componentReport struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok or failing
}

// healthHandler reports the database (what /readyz checks) and each
// background component, and logs each failing part's error.
func healthHandler(logger *slog.Logger, ready func(context.Context) error, components []Component) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		parts := append([]Component{{Name: "database", Health: func() error { return ready(ctx) }}}, components...)
		report := healthReport{Status: "ok", Components: make([]componentReport, len(parts))}
		for i, p := range parts {
			report.Components[i] = componentReport{Name: p.Name, Status: "ok"}
			if err := p.Health(); err != nil {
				report.Status = "degraded"
				report.Components[i].Status = "failing"
				logger.WarnContext(ctx, "health: component failing", "component", p.Name, "err", err)
			}
		}
		return c.JSON(http.StatusOK, report)
	}
}
