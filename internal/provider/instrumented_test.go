package provider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider"
)

// answers is a provider whose every call answers decision (hold) and err.
type answers struct {
	decision app.ProviderDecision
	hold     app.HoldStatus
	err      error
}

func (answers) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey}
}

func (a answers) Charge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) LookupCharge(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) Refund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) LookupRefund(context.Context, app.ProviderRefund) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) Authorize(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) LookupAuthorization(context.Context, app.ProviderCharge) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) Hold(context.Context, app.ProviderCharge) (app.HoldStatus, error) {
	return a.hold, a.err
}
func (a answers) Capture(context.Context, app.ProviderCapture) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) LookupCapture(context.Context, app.ProviderCapture) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) Void(context.Context, app.ProviderVoid) (app.ProviderDecision, error) {
	return a.decision, a.err
}
func (a answers) LookupVoid(context.Context, app.ProviderVoid) (app.ProviderDecision, error) {
	return a.decision, a.err
}

// Every call of every wrapper is counted once under its outcome, and
// traced as a client span of its name with the outcome as an attribute;
// the answer passes through unchanged.
func TestEveryCallIsCountedAndTraced(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("%w: 422", app.ErrProviderRefused)
	notNow := fmt.Errorf("%w: 503", app.ErrProviderNotCharged)
	none := fmt.Errorf("%w: 404", app.ErrNoProviderCharge)
	lost := errors.New("connection reset")
	ctx := context.Background()
	// call makes one call through the wrappers built with opts, and
	// returns the error it passed on.
	type call func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error
	charge := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.Instrument("sandbox", a, calls, opts...).Charge(ctx, app.ProviderCharge{})
		return err
	}
	refund := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentRefunds("sandbox", a, calls, opts...).Refund(ctx, app.ProviderRefund{})
		return err
	}
	authorize := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentAuthorizations("sandbox", a, calls, opts...).Authorize(ctx, app.ProviderCharge{})
		return err
	}
	lookupAuthorization := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentAuthorizations("sandbox", a, calls, opts...).LookupAuthorization(ctx, app.ProviderCharge{IdempotencyKey: "k"})
		return err
	}
	hold := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		h, err := provider.InstrumentAuthorizations("sandbox", a, calls, opts...).Hold(ctx, app.ProviderCharge{IdempotencyKey: "k"})
		if h != a.hold {
			return fmt.Errorf("hold %q passed on as %q", a.hold, h)
		}
		return err
	}
	capture := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentCaptures("sandbox", a, calls, opts...).Capture(ctx, app.ProviderCapture{})
		return err
	}
	lookupCapture := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentCaptures("sandbox", a, calls, opts...).LookupCapture(ctx, app.ProviderCapture{IdempotencyKey: "k"})
		return err
	}
	void := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentVoids("sandbox", a, calls, opts...).Void(ctx, app.ProviderVoid{})
		return err
	}
	lookupVoid := func(a answers, opts []provider.Option, calls *prometheus.CounterVec) error {
		_, err := provider.InstrumentVoids("sandbox", a, calls, opts...).LookupVoid(ctx, app.ProviderVoid{IdempotencyKey: "k"})
		return err
	}
	tests := []struct {
		name    string
		call    call
		answers answers
		span    string
		outcome string
	}{
		{"charge approved", charge, answers{decision: app.ProviderApproved}, "provider charge", "approved"},
		{"refund refused", refund, answers{err: refused}, "provider refund", "refund_refused"},
		{"authorize approved", authorize, answers{decision: app.ProviderApproved}, "provider authorize", "authorization_approved"},
		{"authorize declined", authorize, answers{decision: app.ProviderDeclined}, "provider authorize", "authorization_declined"},
		{"authorize refused", authorize, answers{err: refused}, "provider authorize", "authorization_refused"},
		{"authorize not now", authorize, answers{err: notNow}, "provider authorize", "authorization_not_charged"},
		{"authorize lost", authorize, answers{err: lost}, "provider authorize", "authorization_unknown"},
		{"lookup authorization", lookupAuthorization, answers{decision: app.ProviderApproved}, "provider lookup authorization", "authorization_lookup_charged"},
		{"lookup authorization none", lookupAuthorization, answers{err: none}, "provider lookup authorization", "authorization_lookup_none"},
		{"hold active", hold, answers{hold: app.HoldActive}, "provider hold", "authorization_hold_active"},
		{"hold captured", hold, answers{hold: app.HoldCaptured}, "provider hold", "authorization_hold_captured"},
		{"hold voided", hold, answers{hold: app.HoldVoided}, "provider hold", "authorization_hold_voided"},
		{"hold expired", hold, answers{hold: app.HoldExpired}, "provider hold", "authorization_hold_expired"},
		{"hold none", hold, answers{err: none}, "provider hold", "authorization_hold_none"},
		{"hold lost", hold, answers{err: lost}, "provider hold", "authorization_hold_unknown"},
		{"hold of no state", hold, answers{hold: "frozen"}, "provider hold", "authorization_hold_unknown"},
		{"capture approved", capture, answers{decision: app.ProviderApproved}, "provider capture", "capture_approved"},
		{"capture refused", capture, answers{err: refused}, "provider capture", "capture_refused"},
		{"lookup capture unknown", lookupCapture, answers{err: lost}, "provider lookup capture", "capture_lookup_unknown"},
		{"void declined", void, answers{decision: app.ProviderDeclined}, "provider void", "void_declined"},
		{"void not now", void, answers{err: notNow}, "provider void", "void_not_charged"},
		{"lookup void none", lookupVoid, answers{err: none}, "provider lookup void", "void_lookup_none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			calls, duration := provider.CallsMetric(reg), provider.DurationMetric(reg)
			spans := tracetest.NewSpanRecorder()
			tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
			err := tc.call(tc.answers, []provider.Option{provider.WithDuration(duration), provider.WithTracer(tracer)}, calls)
			if !errors.Is(err, tc.answers.err) {
				t.Fatalf("error %v passed on, want %v", err, tc.answers.err)
			}
			if n := testutil.ToFloat64(calls.WithLabelValues("sandbox", tc.outcome)); n != 1 || testutil.CollectAndCount(calls) != 1 {
				t.Fatalf("%s counted %v times, %d series; want once, alone", tc.outcome, n, testutil.CollectAndCount(calls))
			}
			if n := testutil.CollectAndCount(duration); n != 1 {
				t.Fatalf("%d duration series, want 1", n)
			}
			ended := spans.Ended()
			if len(ended) != 1 || ended[0].Name() != tc.span {
				t.Fatalf("spans %v, want one %q", ended, tc.span)
			}
			if !hasAttribute(ended[0].Attributes(), "payment.provider.outcome", tc.outcome) {
				t.Fatalf("span attributes %v lack the outcome %s", ended[0].Attributes(), tc.outcome)
			}
		})
	}
}

func hasAttribute(attrs []attribute.KeyValue, key, value string) bool {
	for _, a := range attrs {
		if string(a.Key) == key && a.Value.AsString() == value {
			return true
		}
	}
	return false
}

// InstrumentTwoStep is one value that is both ports, each call counted as
// its own wrapper counts it: a charge provider that app.NewChargePayment
// finds to take two-step payments.
func TestInstrumentTwoStepIsBothPorts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	calls := provider.CallsMetric(reg)
	var p app.ChargeProvider = provider.InstrumentTwoStep("sandbox", answers{decision: app.ProviderApproved, hold: app.HoldActive}, calls)
	a, ok := p.(app.AuthorizationProvider)
	if !ok {
		t.Fatal("the two-step wrapper is no app.AuthorizationProvider")
	}
	ctx := context.Background()
	_, _ = p.Charge(ctx, app.ProviderCharge{})
	_, _ = a.Authorize(ctx, app.ProviderCharge{})
	_, _ = a.Hold(ctx, app.ProviderCharge{IdempotencyKey: "k"})
	for _, outcome := range []string{"approved", "authorization_approved", "authorization_hold_active"} {
		if n := testutil.ToFloat64(calls.WithLabelValues("sandbox", outcome)); n != 1 {
			t.Errorf("%s counted %v times, want once", outcome, n)
		}
	}
}
