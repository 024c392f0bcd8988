// Package provider holds what every payment provider adapter shares; each
// adapter lives in a subpackage (sandbox, stripe).
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

// observer counts, times and traces the calls to one provider's ports.
type observer struct {
	name     domain.ProviderName
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec // optional
	tracer   trace.Tracer
}

// Option configures Instrument, InstrumentRefunds, InstrumentAuthorizations,
// InstrumentCaptures and InstrumentVoids.
type Option func(*observer)

// WithDuration also observes each call's latency in duration
// (DurationMetric).
func WithDuration(duration *prometheus.HistogramVec) Option {
	return func(o *observer) { o.duration = duration }
}

// WithTracer makes each call a client span ("provider charge", "provider
// refund", ...), with the provider and the outcome as attributes. Without
// it the spans go to a no-op tracer.
func WithTracer(t trace.Tracer) Option {
	return func(o *observer) { o.tracer = t }
}

func newObserver(name domain.ProviderName, calls *prometheus.CounterVec, opts []Option) observer {
	o := observer{name: name, calls: calls, tracer: noop.NewTracerProvider().Tracer("")}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// call runs one call to the provider in a client span named spanName,
// then counts, times and annotates it under the outcome outcomeOf names.
func (o observer) call(ctx context.Context, spanName string, fn func(context.Context) (app.ProviderDecision, error),
	outcomeOf func(app.ProviderDecision, error) string) (app.ProviderDecision, error) {
	return observe(ctx, o, spanName, fn, outcomeOf)
}

// observe is call for a call of any answer (a decision, a hold).
func observe[T any](ctx context.Context, o observer, spanName string, fn func(context.Context) (T, error),
	outcomeOf func(T, error) string) (T, error) {
	ctx, span := o.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("payment.provider", string(o.name))))
	defer span.End()
	start := time.Now()
	decision, err := fn(ctx)
	elapsed := time.Since(start)

	outcome := outcomeOf(decision, err)
	o.calls.WithLabelValues(string(o.name), outcome).Inc()
	if o.duration != nil {
		o.duration.WithLabelValues(string(o.name), outcome).Observe(elapsed.Seconds())
	}
	span.SetAttributes(attribute.String("payment.provider.outcome", outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
	}
	return decision, err
}

// callOutcome names a call's answer: approved, declined, refused (for
// good), not_charged (for now) or unknown; a modification's, received
// (decided later) or failed too.
func callOutcome(decision app.ProviderDecision, err error) string {
	switch {
	case errors.Is(err, app.ErrProviderRefused):
		return "refused"
	case errors.Is(err, app.ErrProviderNotCharged):
		return "not_charged"
	case err != nil:
		return "unknown"
	case decision == app.ProviderApproved:
		return "approved"
	case decision == app.ProviderDeclined:
		return "declined"
	case decision == app.ProviderReceived:
		return "received"
	case decision == app.ProviderFailed:
		return "failed"
	default:
		return "unknown"
	}
}

// lookupOutcome names a lookup's answer: lookup_charged (the provider holds
// a decision), lookup_none or lookup_unknown.
func lookupOutcome(_ app.ProviderDecision, err error) string {
	switch {
	case errors.Is(err, app.ErrNoProviderCharge):
		return "lookup_none"
	case err != nil:
		return "lookup_unknown"
	default:
		return "lookup_charged"
	}
}

// holdOutcome names a hold's answer: hold_active, hold_captured,
// hold_voided, hold_expired, hold_none (no authorization under the key) or
// hold_unknown.
func holdOutcome(h app.HoldStatus, err error) string {
	switch {
	case errors.Is(err, app.ErrNoProviderCharge):
		return "hold_none"
	case err != nil:
		return "hold_unknown"
	}
	switch h {
	case app.HoldActive, app.HoldCaptured, app.HoldVoided, app.HoldExpired:
		return "hold_" + string(h)
	default:
		return "hold_unknown"
	}
}

// prefixed is outcomeOf's name with prefix before it ("refund_", ...), so
// a dashboard of charges is not skewed by the other calls.
func prefixed[T any](prefix string, outcomeOf func(T, error) string) func(T, error) string {
	return func(v T, err error) string { return prefix + outcomeOf(v, err) }
}

// The outcomes of the calls other than charges, made once rather than on
// every call.
var (
	refundCallOutcome          = prefixed("refund_", callOutcome)
	refundLookupOutcome        = prefixed("refund_", lookupOutcome)
	authorizationCallOutcome   = prefixed("authorization_", callOutcome)
	authorizationLookupOutcome = prefixed("authorization_", lookupOutcome)
	authorizationHoldOutcome   = prefixed("authorization_", holdOutcome)
	captureCallOutcome         = prefixed("capture_", callOutcome)
	captureLookupOutcome       = prefixed("capture_", lookupOutcome)
	voidCallOutcome            = prefixed("void_", callOutcome)
	voidLookupOutcome          = prefixed("void_", lookupOutcome)
)

// Instrumented wraps a provider's charges and counts, times and traces its
// calls.
type Instrumented struct {
	observer
	next app.ChargeProvider
}

// Instrument returns next with every call counted in calls.
func Instrument(name domain.ProviderName, next app.ChargeProvider, calls *prometheus.CounterVec, opts ...Option) *Instrumented {
	return &Instrumented{observer: newObserver(name, calls, opts), next: next}
}

// Abilities are next's: counting a call changes nothing of what the
// provider can tell.
func (p *Instrumented) Abilities() app.ProviderAbilities { return p.next.Abilities() }

func (p *Instrumented) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return p.call(ctx, "provider charge", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.Charge(ctx, req)
	}, callOutcome)
}

// LookupCharge implements app.ChargeProvider: counted and timed with the
// charges, under outcomes of its own (lookup_charged, lookup_none,
// lookup_unknown), so a dashboard of charges is not skewed by lookups.
func (p *Instrumented) LookupCharge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return p.call(ctx, "provider lookup charge", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.LookupCharge(ctx, req)
	}, lookupOutcome)
}

// InstrumentedRefunds wraps a provider's refunds: counted in the same
// calls metric as the charges, under the same outcomes with "refund_"
// before them (refund_approved, refund_lookup_none, ...).
type InstrumentedRefunds struct {
	observer
	next app.RefundProvider
}

// InstrumentRefunds returns next with every refund call counted in calls.
func InstrumentRefunds(name domain.ProviderName, next app.RefundProvider, calls *prometheus.CounterVec, opts ...Option) *InstrumentedRefunds {
	return &InstrumentedRefunds{observer: newObserver(name, calls, opts), next: next}
}

// Abilities are next's.
func (p *InstrumentedRefunds) Abilities() app.ProviderAbilities { return p.next.Abilities() }

func (p *InstrumentedRefunds) Refund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	return p.call(ctx, "provider refund", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.Refund(ctx, req)
	}, refundCallOutcome)
}

func (p *InstrumentedRefunds) LookupRefund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	return p.call(ctx, "provider lookup refund", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.LookupRefund(ctx, req)
	}, refundLookupOutcome)
}

// InstrumentedAuthorizations wraps a provider's authorizations: counted in
// the same calls metric as the charges, under the same outcomes with
// "authorization_" before them (authorization_approved,
// authorization_lookup_none, ...), and its holds under
// authorization_hold_active, _captured, _voided, _expired, _none and
// _unknown.
type InstrumentedAuthorizations struct {
	observer
	next app.AuthorizationProvider
}

// InstrumentAuthorizations returns next with every authorization call
// counted in calls.
func InstrumentAuthorizations(name domain.ProviderName, next app.AuthorizationProvider, calls *prometheus.CounterVec, opts ...Option) *InstrumentedAuthorizations {
	return &InstrumentedAuthorizations{observer: newObserver(name, calls, opts), next: next}
}

func (p *InstrumentedAuthorizations) Authorize(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return p.call(ctx, "provider authorize", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.Authorize(ctx, req)
	}, authorizationCallOutcome)
}

func (p *InstrumentedAuthorizations) LookupAuthorization(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return p.call(ctx, "provider lookup authorization", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.LookupAuthorization(ctx, req)
	}, authorizationLookupOutcome)
}

func (p *InstrumentedAuthorizations) Hold(ctx context.Context, req app.ProviderCharge) (app.HoldStatus, error) {
	return observe(ctx, p.observer, "provider hold", func(ctx context.Context) (app.HoldStatus, error) {
		return p.next.Hold(ctx, req)
	}, authorizationHoldOutcome)
}

// InstrumentedCaptures wraps a provider's captures: counted in the same
// calls metric, under the charges' outcomes with "capture_" before them.
type InstrumentedCaptures struct {
	observer
	next app.CaptureProvider
}

// InstrumentCaptures returns next with every capture call counted in
// calls.
func InstrumentCaptures(name domain.ProviderName, next app.CaptureProvider, calls *prometheus.CounterVec, opts ...Option) *InstrumentedCaptures {
	return &InstrumentedCaptures{observer: newObserver(name, calls, opts), next: next}
}

// Abilities are next's.
func (p *InstrumentedCaptures) Abilities() app.ProviderAbilities { return p.next.Abilities() }

func (p *InstrumentedCaptures) Capture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	return p.call(ctx, "provider capture", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.Capture(ctx, req)
	}, captureCallOutcome)
}

func (p *InstrumentedCaptures) LookupCapture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	return p.call(ctx, "provider lookup capture", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.LookupCapture(ctx, req)
	}, captureLookupOutcome)
}

// InstrumentedVoids wraps a provider's voids: counted in the same calls
// metric, under the charges' outcomes with "void_" before them.
type InstrumentedVoids struct {
	observer
	next app.VoidProvider
}

// InstrumentVoids returns next with every void call counted in calls.
func InstrumentVoids(name domain.ProviderName, next app.VoidProvider, calls *prometheus.CounterVec, opts ...Option) *InstrumentedVoids {
	return &InstrumentedVoids{observer: newObserver(name, calls, opts), next: next}
}

// Abilities are next's.
func (p *InstrumentedVoids) Abilities() app.ProviderAbilities { return p.next.Abilities() }

func (p *InstrumentedVoids) Void(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	return p.call(ctx, "provider void", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.Void(ctx, req)
	}, voidCallOutcome)
}

func (p *InstrumentedVoids) LookupVoid(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	return p.call(ctx, "provider lookup void", func(ctx context.Context) (app.ProviderDecision, error) {
		return p.next.LookupVoid(ctx, req)
	}, voidLookupOutcome)
}

// ChargeAndAuthorizationProvider is a provider that charges in one step
// and in two.
type ChargeAndAuthorizationProvider interface {
	app.ChargeProvider
	app.AuthorizationProvider
}

// InstrumentedTwoStep is a provider's charges and authorizations, both
// wrapped, in one value: app.NewChargePayment takes a provider of two-step
// payments among its charge providers, as one that is an
// app.AuthorizationProvider too, so Instrumented alone would hide its
// authorizations.
type InstrumentedTwoStep struct {
	// Instrumented counts and traces the charges.
	*Instrumented
	// InstrumentedAuthorizations counts and traces the authorizations and
	// holds.
	*InstrumentedAuthorizations
}

// InstrumentTwoStep returns next with every charge and authorization call
// counted in calls, as Instrument and InstrumentAuthorizations count them.
func InstrumentTwoStep(name domain.ProviderName, next ChargeAndAuthorizationProvider, calls *prometheus.CounterVec, opts ...Option) *InstrumentedTwoStep {
	return &InstrumentedTwoStep{Instrumented: Instrument(name, next, calls, opts...),
		InstrumentedAuthorizations: InstrumentAuthorizations(name, next, calls, opts...)}
}

var (
	_ app.ChargeProvider        = (*InstrumentedTwoStep)(nil)
	_ app.AuthorizationProvider = (*InstrumentedTwoStep)(nil)
	_ app.ChargeProvider        = (*Instrumented)(nil)
	_ app.RefundProvider        = (*InstrumentedRefunds)(nil)
	_ app.AuthorizationProvider = (*InstrumentedAuthorizations)(nil)
	_ app.CaptureProvider       = (*InstrumentedCaptures)(nil)
	_ app.VoidProvider          = (*InstrumentedVoids)(nil)
)
