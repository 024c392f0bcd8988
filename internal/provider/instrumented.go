// Package provider holds what every payment provider adapter shares; each
// adapter lives in a subpackage (sandbox is the only one so far).
package provider

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

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

// Instrumented wraps a provider and counts its calls.
type Instrumented struct {
	name  domain.ProviderName
	next  app.PaymentProvider
	calls *prometheus.CounterVec
}

// Instrument returns next with every call counted in calls.
func Instrument(name domain.ProviderName, next app.PaymentProvider, calls *prometheus.CounterVec) *Instrumented {
	return &Instrumented{name: name, next: next, calls: calls}
}

// Charge implements app.PaymentProvider.
func (p *Instrumented) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	decision, err := p.next.Charge(ctx, req)
	outcome := "unknown"
	switch {
	case errors.Is(err, app.ErrProviderNotCharged):
		outcome = "not_charged"
	case err != nil:
	case decision == app.ProviderApproved:
		outcome = "approved"
	case decision == app.ProviderDeclined:
		outcome = "declined"
	}
	p.calls.WithLabelValues(string(p.name), outcome).Inc()
	return decision, err
}
