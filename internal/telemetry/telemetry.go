// Package telemetry is the service's OpenTelemetry tracing: the tracer
// provider, W3C trace-context propagation (Kafka record headers and the
// outbox row) and trace ids in log lines.
//
// Tracing is on when an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, see internal/config): the SDK then
// batches spans and exports them over OTLP/HTTP. When it is off, the
// provider is OpenTelemetry's no-op provider, and "off costs next to
// nothing" holds by construction:
//
//   - no SDK object, exporter, span processor or goroutine is created;
//   - the HTTP middleware and the database statement tracer are not
//     installed at all (Enabled reports false, and the adapters skip them);
//   - the spans the use case, the provider adapter, the relay and the
//     consumer start go to the no-op tracer: a context value and no
//     allocation of a span, nothing recorded, nothing sent;
//   - nothing is injected into Kafka headers or outbox rows, because the
//     no-op spans carry no valid span context;
//   - log lines are not wrapped (LogHandler returns the handler as it is).
//
// BenchmarkTracing in internal/http measures what is left.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config says where spans go. The zero value is tracing off.
type Config struct {
	// Endpoint is the full OTLP/HTTP traces URL (.../v1/traces); empty is off.
	Endpoint string
	// ServiceName is the service.name resource attribute.
	ServiceName string
}

// Tracing is the service's tracer provider, on or off.
type Tracing struct {
	provider trace.TracerProvider
	enabled  bool
	shutdown func(context.Context) error
}

// Off is tracing switched off: OpenTelemetry's no-op provider.
func Off() *Tracing {
	return &Tracing{provider: noop.NewTracerProvider()}
}

// With is tracing on, with a provider the caller built and shuts down
// (tests use the SDK with an in-memory exporter).
func With(provider trace.TracerProvider) *Tracing {
	return &Tracing{provider: provider, enabled: true}
}

// New builds the SDK with an OTLP/HTTP exporter when cfg.Endpoint is set,
// and returns Off otherwise. The exporter's headers, timeout, compression
// and certificates, the batch processor's limits, the sampler
// (OTEL_TRACES_SAMPLER, default parent-based always-on) and
// OTEL_RESOURCE_ATTRIBUTES are read by the SDK from the environment.
// Export errors are logged on logger; they never fail a request.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return Off(), nil
	}
	exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", cfg.Endpoint, err)
	}
	// Later options win: service.name is OTEL_SERVICE_NAME's (default
	// payment-service) even if OTEL_RESOURCE_ATTRIBUTES names another.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	// The SDK reports export failures through the global error handler; by
	// default that is a line on stderr in another format than ours.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "err", err)
	}))
	logger.InfoContext(ctx, "tracing: exporting spans over OTLP/HTTP", "endpoint", cfg.Endpoint, "service_name", cfg.ServiceName)
	return &Tracing{provider: provider, enabled: true, shutdown: provider.Shutdown}, nil
}

// Enabled reports whether spans are recorded and exported. Adapters whose
// instrumentation has a cost of its own even with a no-op provider (the
// HTTP middleware, the database statement tracer) are installed only then.
func (t *Tracing) Enabled() bool { return t.enabled }

// TracerProvider is the provider spans are started from.
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.provider }

// Tracer returns the tracer of one instrumented package; name is its
// import path.
func (t *Tracing) Tracer(name string) trace.Tracer { return t.provider.Tracer(name) }

// TracerIfEnabled is Tracer while tracing is on, and nil while it is off:
// for instrumentation that does work of its own before it starts a span
// (the consumer and the relay read every record's trace context to link
// it), which a nil tracer tells to skip that work.
func (t *Tracing) TracerIfEnabled(name string) trace.Tracer {
	if !t.enabled {
		return nil
	}
	return t.Tracer(name)
}

// Shutdown exports the spans still buffered and stops the SDK; a no-op when
// tracing is off or the provider belongs to the caller.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}
