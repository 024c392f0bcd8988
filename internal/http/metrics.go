package http

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

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
