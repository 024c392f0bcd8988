package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context (traceparent and tracestate) is the one propagation
// format, over HTTP, in Kafka record headers and in the outbox row. It is
// stateless, so it needs no configuration and costs nothing to hold.
var w3c = propagation.TraceContext{}

// Header names of W3C Trace Context, as HTTP headers and as Kafka record
// headers (the W3C's Kafka binding uses the same names).
const (
	// HeaderTraceparent carries the trace id, the parent span and flags.
	HeaderTraceparent = "traceparent"
	// HeaderTracestate carries vendor-specific trace state.
	HeaderTracestate = "tracestate"
)

// TraceContext returns the W3C trace-context fields of ctx's span
// (traceparent, and tracestate when there is one), or nil when ctx carries
// no valid span context: tracing is off, or nothing is being traced.
func TraceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	fields := propagation.MapCarrier{}
	w3c.Inject(ctx, fields)
	return fields
}

// RemoteSpanContext parses W3C trace-context fields (as TraceContext
// returns them); the result is not valid when fields hold none, or a
// malformed traceparent.
func RemoteSpanContext(fields map[string]string) trace.SpanContext {
	if fields[HeaderTraceparent] == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier(fields)))
}

// Propagator is W3C Trace Context, for instrumentation that takes a
// propagator (the HTTP server middleware).
func Propagator() propagation.TextMapPropagator { return w3c }
