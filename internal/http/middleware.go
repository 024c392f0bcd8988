package http

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/telemetry"
)

// The middleware every request passes through, in the order NewHandler
// installs it: its log line, its metrics, its client's key (per route),
// and its span when tracing is on.

// requestLogger writes one structured line per request, with the request id
// that RequestID put in X-Request-Id.
func requestLogger(logger *slog.Logger) echo.MiddlewareFunc {
	return middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogMethod: true, LogURIPath: true, LogRoutePath: true, LogStatus: true, LogLatency: true, LogRequestID: true,
		LogError:    true,
		HandleError: true, // runs the error handler first, so the status logged is the one sent
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			level := slog.LevelInfo
			if v.Status >= 500 {
				level = slog.LevelError
			}
			logger.LogAttrs(c.Request().Context(), level, "http request",
				slog.String("request_id", v.RequestID),
				slog.String("method", v.Method),
				slog.String("path", v.URIPath),
				slog.String("route", v.RoutePath),
				slog.Int("status", v.Status),
				slog.Duration("latency", v.Latency),
				slog.String("client_id", string(clientID(c))),
			)
			return nil
		},
	})
}

// metrics are the HTTP layer's Prometheus series.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	replays    prometheus.Counter
	keyReused  prometheus.Counter
	inProgress prometheus.Counter
	unknown    prometheus.Counter
	// routes are the route label's values besides "unmatched" (useRoutes).
	routes map[string]bool
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "HTTP request latency by method and route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_idempotency_replays_total",
			Help: "Requests answered with a stored response (same key, same command).",
		}),
		keyReused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_idempotency_key_conflicts_total",
			Help: "Requests rejected because their key was used for a different command (409 idempotency-key-reused).",
		}),
		inProgress: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_idempotency_in_progress_total",
			Help: "Requests rejected because the same key, external payment or order was in flight (409 request-in-progress).",
		}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_outcome_unknown_total",
			Help: "Charges answered 503 outcome-unknown: the provider was called and its answer was lost or not recorded; the retry or the completer resolves them.",
		}),
	}
	reg.MustRegister(m.requests, m.duration, m.replays, m.keyReused, m.inProgress, m.unknown)
	return m
}

// middleware records every request. Every label takes its value from a
// fixed set, whatever the request: a series lives as long as the process,
// so a label that echoed the client (a made-up method, a path) would let
// anyone without a key grow /metrics and the process's memory at will.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = problemFor(err).Status
		}
		method, route := methodLabel(c.Request().Method), m.routeLabel(c.Path())
		m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		return err
	}
}

// knownMethods are the methods of RFC 9110 and PATCH; every other method
// is counted as "other".
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true,
}

func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}

// useRoutes fixes the values the route label may take: the patterns
// registered on e (/payments/:id), known once every route is. A request no
// route matched is "unmatched", whatever echo left in its path.
func (m *metrics) useRoutes(e *echo.Echo) {
	m.routes = map[string]bool{}
	for _, r := range e.Routes() {
		m.routes[r.Path] = true
	}
}

func (m *metrics) routeLabel(path string) string {
	if m.routes[path] {
		return path
	}
	return "unmatched"
}

const clientIDContextKey = "payment-service.client-id"

// authenticate checks `Authorization: Bearer <key>` against the configured
// keys. The comparison is constant-time over SHA-256 digests (equal length
// by construction) and visits every configured key, so neither the key's
// length nor which client matched leaks through timing.
func authenticate(keys []config.APIKey) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				return unauthorized()
			}
			digest := sha256.Sum256([]byte(token))
			client := ""
			for _, k := range keys {
				if subtle.ConstantTimeCompare(digest[:], k.KeyDigest[:]) == 1 {
					client = k.ClientID
				}
			}
			if client == "" {
				return unauthorized()
			}
			c.Set(clientIDContextKey, domain.ClientID(client))
			return next(c)
		}
	}
}

func clientID(c echo.Context) domain.ClientID {
	id, _ := c.Get(clientIDContextKey).(domain.ClientID)
	return id
}

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
		// Request metrics are Prometheus's here (metrics, above).
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
