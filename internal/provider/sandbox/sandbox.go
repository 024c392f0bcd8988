// Package sandbox is a deterministic payment provider for development and
// tests. The external payment id decides the answer:
//
//	decline_...  declined
//	fail_...     transient failure (an error: the outcome is unknown)
//	anything else approved
//
// Like a real provider it honours idempotency keys: a repeated key gets the
// first answer and charges nothing new. Charges counts real charges, so
// tests can tell a double charge from a repeated call.
package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/example/payment-service/internal/app"
)

// Name is the provider name clients send as paymentProvider.
const Name = "sandbox"

// ErrTransient is the sandbox's transient failure.
var ErrTransient = errors.New("sandbox: transient failure")

// Provider is the sandbox adapter. The zero value is not usable; use New.
type Provider struct {
	latency time.Duration

	mu      sync.Mutex
	answers map[string]app.ProviderDecision // by provider idempotency key
}

// New returns a sandbox that takes latency to answer each call, to make
// races and crashes observable.
func New(latency time.Duration) *Provider {
	return &Provider{latency: latency, answers: make(map[string]app.ProviderDecision)}
}

// Charge implements app.PaymentProvider.
func (p *Provider) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
		}
	}
	external := string(req.Charge.ExternalPaymentID)
	if strings.HasPrefix(external, "fail_") {
		return "", ErrTransient
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.answers[req.IdempotencyKey]; ok {
		return d, nil
	}
	d := app.ProviderApproved
	if strings.HasPrefix(external, "decline_") {
		d = app.ProviderDeclined
	}
	p.answers[req.IdempotencyKey] = d
	return d, nil
}

// Charges returns how many distinct charges (idempotency keys) the sandbox
// has decided.
func (p *Provider) Charges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.answers)
}
