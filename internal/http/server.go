// Package http is the REST adapter: echo routes, authentication, request
// validation, and the one place where errors become RFC 9457 problems.
package http

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/telemetry"
)

// Deps is what the HTTP adapter needs.
type Deps struct {
	// Logger gets one line per request and every 5xx's cause.
	Logger *slog.Logger
	// APIKeys are the clients allowed to call the API (API_KEYS).
	APIKeys []config.APIKey
	// Providers are the payment providers a charge may name.
	Providers []domain.ProviderName
	// ChargePayment serves POST /payments.
	ChargePayment *app.ChargePayment
	// GetPayment serves GET /payments/{id}.
	GetPayment *app.GetPayment
	// RefundPayment serves POST /payments/{id}/refunds.
	RefundPayment *app.RefundPayment
	// ListRefunds serves GET /payments/{id}/refunds.
	ListRefunds *app.ListRefunds
	// CapturePayment serves POST /payments/{id}/captures.
	CapturePayment *app.PaymentTransition
	// VoidPayment serves POST /payments/{id}/voids.
	VoidPayment *app.PaymentTransition
	// GetOrder serves GET /orders/{orderId}.
	GetOrder *app.GetOrder
	// ApplyProviderEvent serves POST /webhooks/{provider}, for the
	// provider among Providers whose deliveries are configured.
	ApplyProviderEvent *app.ApplyProviderEvent
	// Webhooks are the secrets and tolerance the sandbox's deliveries are
	// verified with (no secrets: 503).
	Webhooks config.Webhooks
	// StripeEvents reads Stripe's deliveries to POST /webhooks/stripe
	// (internal/provider/stripe); nil: 503.
	StripeEvents ProviderEventReader
	// Ready reports whether the payment API can serve: the database
	// answers. Nothing else: a background component's trouble must not
	// take the API out of rotation.
	Ready func(ctx context.Context) error
	// Components are the background parts reported on /health.
	Components []Component
	// Registry holds the metrics /metrics serves; the handler registers
	// its own on it.
	Registry *prometheus.Registry
	// Tracing, when on, gives every API request a server span (middleware.go).
	// Nil is off.
	Tracing *telemetry.Tracing
	// Reconciliation, if set, serves the operators' endpoints
	// (/reconciliation/...) to OperatorClients.
	Reconciliation app.ReconciliationReader
	// OperatorClients are the clients (API_KEYS) that may read them
	// (OPERATOR_CLIENTS); any other gets 403.
	OperatorClients []string
}

// NewHandler builds the service's HTTP handler.
func NewHandler(d Deps) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(d.Logger)
	m := newMetrics(d.Registry)

	e.Use(middleware.RequestID())
	e.Use(requestLogger(d.Logger))
	e.Use(m.middleware)
	e.Use(middleware.Recover())
	if d.Tracing != nil && d.Tracing.Enabled() {
		e.Use(nameSpanByRoute)
	}

	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	})
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := d.Ready(ctx); err != nil {
			d.Logger.WarnContext(ctx, "not ready", "err", err)
			p := newProblem(http.StatusServiceUnavailable, codeServiceUnavailable, "Not ready", "The database cannot be reached.")
			p.retryAfter = retryAfterDefault
			return p
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	e.GET("/health", healthHandler(d.Logger, d.Ready, d.Components))
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{})))
	registerDocs(e)

	h := &paymentHandlers{
		charge:   d.ChargePayment,
		get:      d.GetPayment,
		validate: newValidator(),
		metrics:  m,
	}
	// Authentication is per route, not on a group: an echo group with
	// middleware also catches unknown paths, which must stay 404, not 401.
	auth := authenticate(d.APIKeys)
	e.POST("/payments", h.chargePayment, auth)
	e.GET("/payments/:id", h.getPayment, auth)
	refunds := &refundHandlers{paymentHandlers: h, refund: d.RefundPayment, list: d.ListRefunds}
	e.POST("/payments/:id/refunds", refunds.refundPayment, auth)
	e.GET("/payments/:id/refunds", refunds.listRefunds, auth)
	e.GET("/payments/:id/refunds/:refundId", refunds.getRefund, auth)
	if d.CapturePayment != nil && d.VoidPayment != nil {
		transitions := &transitionHandlers{paymentHandlers: h, capture: d.CapturePayment, void: d.VoidPayment}
		e.POST("/payments/:id/captures", transitions.capturePayment, auth)
		e.GET("/payments/:id/captures/:captureId", getTransition(d.CapturePayment, "captureId"), auth)
		e.POST("/payments/:id/voids", transitions.voidPayment, auth)
		e.GET("/payments/:id/voids/:voidId", getTransition(d.VoidPayment, "voidId"), auth)
	}
	e.GET("/orders/:orderId", (&orderHandlers{get: d.GetOrder}).getOrder, auth)
	if d.Reconciliation != nil {
		(&reconciliationHandlers{reader: d.Reconciliation, now: time.Now}).register(e, auth, d.OperatorClients)
	}
	// Signed by the provider, not called by a client: no API key.
	for _, webhooks := range newWebhookHandlers(d, d.Registry) {
		e.POST(webhookPath(webhooks.provider), webhooks.deliver)
	}
	m.useRoutes(e) // after the last route, before the first request
	return withTracing(e, d.Tracing)
}
