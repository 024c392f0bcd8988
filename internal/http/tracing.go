package http

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/telemetry"
)

// withTracing wraps the echo handler in OpenTelemetry's net/http
// instrumentation, when tracing is on: a server span per request, continued
// from the caller's W3C traceparent header. Echo's own OpenTelemetry
// middleware (labstack/echo-opentelemetry) is for echo v5 only, and the
// contrib module for v4 (otelecho) is deprecated; otelhttp is maintained by
// the OpenTelemetry project, and nameSpanByRoute gives it echo's route.
//
// With tracing off the handler is returned as it is: no middleware, no cost.
// Probes and scrapes are not traced: they would bury the payments in noise.
func withTracing(h http.Handler, tracing *telemetry.Tracing) http.Handler {
	if tracing == nil || !tracing.Enabled() {
		return h
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithTracerProvider(tracing.TracerProvider()),
		otelhttp.WithPropagators(telemetry.Propagator()),
		// Request metrics are Prometheus's here (metrics.go).
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/health", "/metrics":
				return false
			}
			return true
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
	)
}

// nameSpanByRoute names the request's span after the route it matched
// ("POST /payments", "GET /payments/:id"), as the HTTP semantic conventions
// ask: the path itself would make one span name per payment id. It runs
// after routing, so c.Path() is the route.
func nameSpanByRoute(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() && c.Path() != "" {
			span.SetName(c.Request().Method + " " + c.Path())
			span.SetAttributes(semconv.HTTPRoute(c.Path()))
		}
		return next(c)
	}
}
