package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/telemetry"
)

// BenchmarkInstrumentation is the tracing work one charge does besides the
// HTTP middleware and the statement tracer (which tracing off does not
// install): the spans of the three phases and the provider call, each with
// two attributes, the outbox row's trace context, and the request's log
// line through the log handler. "none" is the log line alone, the code
// before tracing existed; "off" minus "none" is what tracing off costs per
// request; "on" is the SDK's part (spans dropped by the exporter).
//
//	go test -run '^$' -bench BenchmarkInstrumentation -benchmem ./internal/telemetry/
func BenchmarkInstrumentation(b *testing.B) {
	on := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer func() {
		if err := on.Shutdown(context.Background()); err != nil {
			b.Error(err)
		}
	}()
	b.Run("none", func(b *testing.B) {
		logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
		b.ReportAllocs()
		for b.Loop() {
			logger.InfoContext(context.Background(), "http request", "status", 201)
		}
	})
	for _, c := range []struct {
		name    string
		tracing *telemetry.Tracing
	}{{"off", telemetry.Off()}, {"on", telemetry.With(on)}} {
		b.Run(c.name, func(b *testing.B) {
			tracer := c.tracing.Tracer("bench")
			logger := slog.New(c.tracing.LogHandler(slog.NewJSONHandler(io.Discard, nil)))
			b.ReportAllocs()
			for b.Loop() {
				ctx, request := tracer.Start(context.Background(), "POST /payments")
				for _, phase := range []string{"charge claim", "provider charge", "charge record"} {
					pctx, span := tracer.Start(ctx, phase, trace.WithAttributes(
						attribute.Int64("payment.order_id", 1001), attribute.String("payment.provider", "sandbox")))
					if phase == "charge record" {
						_ = telemetry.TraceContext(pctx)
					}
					span.End()
				}
				logger.InfoContext(ctx, "http request", "status", 201)
				request.End()
			}
		})
	}
}

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
