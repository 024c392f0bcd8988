package http_test

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/testdb"
)

// BenchmarkTracing measures what tracing costs POST /payments, over real
// HTTP against the real service and PostgreSQL, as BenchmarkChargePayment
// does, with tracing
//
//	off   the default (no OTEL_* endpoint): no SDK, no HTTP middleware, no
//	      statement tracer; the use case's spans go to the no-op tracer
//	on    the SDK with a batch span processor, as in production, exporting
//	      to an exporter that drops the spans (no network in a benchmark)
//
// for new charges (C=1 and C=16) and replays (C=16), off right before on
// for each case. It reports requests/s and p50/p99; nothing is asserted.
// -count repeats each sub-benchmark in a row, so on a shared machine
// compare medians of several runs, and check the load first: the
// difference to find is a few per cent.
//
//	go test -run '^$' -bench BenchmarkTracing -benchtime 2000x -count 3 ./internal/http/
//
// The cost of tracing off in isolation, without the database's noise, is
// BenchmarkInstrumentationOff in internal/telemetry.
func BenchmarkTracing(b *testing.B) {
	for _, c := range []struct {
		mode    string
		clients int
	}{{"new-key", 1}, {"new-key", 16}, {"replay", 16}} {
		for _, tracing := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("%s/clients=%d/tracing=%s", c.mode, c.clients, tracing), func(b *testing.B) {
				var opts []startOption
				if tracing == "on" {
					provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
					b.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
					opts = append(opts, func(o *startOptions) {
						o.service = append(o.service, service.WithTracerProvider(provider))
					})
				}
				// The service as a user runs it: its request log included.
				s := startServiceWith(b, testdb.New(b), map[string]string{"DATABASE_MAX_CONNS": "32"}, sandboxprovider.Config{}, opts...)
				benchmarkCharges(b, s, c.mode, c.clients)
			})
		}
	}
}

// discardExporter drops what the batch processor hands it.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }
