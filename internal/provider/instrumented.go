// Package provider holds what every payment provider adapter shares; each
// adapter lives in a subpackage (sandbox is the only one so far).
package provider

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// CallsMetric counts every call to a provider port, labelled by provider and
// outcome: approved, declined, not_charged (the provider certainly did not
// charge) or unknown (it may have; the retry or the completer finds out).
// Operators and outside tests read it to see that duplicate requests never
// reach the provider; a rising unknown rate is the network or the provider
// losing answers.
func CallsMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payment_provider_calls_total",
		Help: "Calls to the payment provider port, by provider and outcome.",
	}, []string{"provider", "outcome"})
	reg.MustRegister(c)
	return c
}

// DurationMetric is the latency of provider calls, by provider and outcome
// (the labels of CallsMetric). A call is bounded by PROVIDER_TIMEOUT, so
// the buckets reach 10 s; an unknown outcome that sits at the top bucket is
// a timeout.
func DurationMetric(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "payment_provider_call_duration_seconds",
		Help:    "Duration of calls to the payment provider port, by provider and outcome.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"provider", "outcome"})
	reg.MustRegister(h)
	return h
}

// Instrumented wraps a provider and counts, times and traces its calls.
type Instrumented struct {
	name     domain.ProviderName
	next     app.PaymentProvider
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec // optional
	tracer   trace.Tracer
}

// Option configures Instrument.
type Option func(*Instrumented)

// WithDuration also observes each call's latency in duration
// (DurationMetric).
func WithDuration(duration *prometheus.HistogramVec) Option {
	return func(p *Instrumented) { p.duration = duration }
}

// WithTracer makes each call a client span, "provider charge", with the
// provider and the outcome as attributes. Without it the spans go to a
// no-op tracer.
func WithTracer(t trace.Tracer) Option {
	return func(p *Instrumented) { p.tracer = t }
}

// Instrument returns next with every call counted in calls.
func Instrument(name domain.ProviderName, next app.PaymentProvider, calls *prometheus.CounterVec, opts ...Option) *Instrumented {
	p := &Instrumented{name: name, next: next, calls: calls, tracer: noop.NewTracerProvider().Tracer("")}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

// Charge implements app.PaymentProvider.
func (p *Instrumented) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	ctx, span := p.tracer.Start(ctx, "provider charge", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("payment.provider", string(p.name))))
	defer span.End()
	start := time.Now()
	decision, err := p.next.Charge(ctx, req)
	elapsed := time.Since(start)

	outcome := "unknown"
	switch {
	case errors.Is(err, app.ErrProviderRefused):
		outcome = "refused"
	case errors.Is(err, app.ErrProviderNotCharged):
		outcome = "not_charged"
	case err != nil:
	case decision == app.ProviderApproved:
		outcome = "approved"
	case decision == app.ProviderDeclined:
		outcome = "declined"
	}
	p.observe(span, outcome, elapsed, err)
	return decision, err
}

// observe counts, times and annotates one call.
func (p *Instrumented) observe(span trace.Span, outcome string, elapsed time.Duration, err error) {
	p.calls.WithLabelValues(string(p.name), outcome).Inc()
	if p.duration != nil {
		p.duration.WithLabelValues(string(p.name), outcome).Observe(elapsed.Seconds())
	}
	span.SetAttributes(attribute.String("payment.provider.outcome", outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
	}
}

// LookupCharge implements app.PaymentProvider: counted and timed with the
// charges, under outcomes of its own (lookup_charged, lookup_none,
// lookup_unknown), so a dashboard of charges is not skewed by lookups.
func (p *Instrumented) LookupCharge(ctx context.Context, idempotencyKey string) (app.ProviderDecision, error) {
	ctx, span := p.tracer.Start(ctx, "provider lookup charge", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("payment.provider", string(p.name))))
	defer span.End()
	start := time.Now()
	decision, err := p.next.LookupCharge(ctx, idempotencyKey)
	elapsed := time.Since(start)

	outcome := "lookup_charged"
	switch {
	case errors.Is(err, app.ErrNoProviderCharge):
		outcome = "lookup_none"
	case err != nil:
		outcome = "lookup_unknown"
	}
	p.observe(span, outcome, elapsed, err)
	return decision, err
}
