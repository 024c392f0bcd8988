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

// middleware records every request. The route label is the route pattern
// (/payments/:id), never the raw path, so label cardinality stays bounded.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = problemFor(err).Status
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		m.requests.WithLabelValues(c.Request().Method, route, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(c.Request().Method, route).Observe(time.Since(start).Seconds())
		return err
	}
}
