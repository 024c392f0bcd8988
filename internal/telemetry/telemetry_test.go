package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/example/payment-service/internal/telemetry"
)

// With an endpoint, spans reach an OTLP/HTTP receiver: the real exporter
// posts protobuf to /v1/traces, and Shutdown flushes what is buffered.
func TestNewExportsOverOTLPHTTP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posts []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		if !bytes.Contains(body, []byte("test-span")) || !bytes.Contains(body, []byte("payments-test")) {
			t.Errorf("export does not hold the span and the service name: %q", body)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer receiver.Close()

	tr, err := telemetry.New(context.Background(), telemetry.Config{Endpoint: receiver.URL + "/v1/traces", ServiceName: "payments-test"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatal("tracing with an endpoint is not enabled")
	}
	if tr.TracerIfEnabled("test") == nil {
		t.Fatal("TracerIfEnabled is nil with tracing on")
	}
	_, span := tr.Tracer("test").Start(context.Background(), "test-span")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 1 || posts[0] != "POST /v1/traces application/x-protobuf" {
		t.Fatalf("receiver got %v, want one protobuf POST to /v1/traces", posts)
	}
}

// Without an endpoint nothing is built: the provider is the no-op one, its
// spans carry no span context, so nothing can be injected anywhere, and the
// log handler is the one passed in.
func TestNewWithoutEndpointIsOff(t *testing.T) {
	t.Parallel()
	tr, err := telemetry.New(context.Background(), telemetry.Config{ServiceName: "payment-service"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() {
		t.Fatal("tracing without an endpoint is enabled")
	}
	if tr.TracerIfEnabled("test") != nil {
		t.Fatal("TracerIfEnabled is a tracer with tracing off: the consumer and the relay would read every record's trace context for nothing")
	}
	if _, ok := tr.TracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatal("tracing off built the SDK")
	}
	ctx, span := tr.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("a span of tracing off records or has a span context")
	}
	if fields := telemetry.TraceContext(ctx); fields != nil {
		t.Fatalf("tracing off injects %v", fields)
	}
	h := slog.NewJSONHandler(io.Discard, nil)
	if tr.LogHandler(h) != slog.Handler(h) {
		t.Fatal("tracing off wraps the log handler")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTraceContextRoundTrip(t *testing.T) {
	t.Parallel()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	ctx, span := provider.Tracer("test").Start(context.Background(), "parent")
	defer span.End()

	fields := telemetry.TraceContext(ctx)
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	if fields[telemetry.HeaderTraceparent] != want {
		t.Fatalf("traceparent %q, want %q", fields[telemetry.HeaderTraceparent], want)
	}
	sc := telemetry.RemoteSpanContext(fields)
	if !sc.IsRemote() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("parsed %v, want the parent's ids", sc)
	}

	for _, bad := range []map[string]string{nil, {}, {"traceparent": "garbage"}, {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}} {
		if telemetry.RemoteSpanContext(bad).IsValid() {
			t.Errorf("%v parsed as a valid span context", bad)
		}
	}
}

func TestLogHandlerAddsTraceAndSpanIDs(t *testing.T) {
	t.Parallel()
	provider := sdktrace.NewTracerProvider()
	tr := telemetry.With(provider)
	var out bytes.Buffer
	logger := slog.New(tr.LogHandler(slog.NewJSONHandler(&out, nil))).With("component", "test")

	ctx, span := provider.Tracer("test").Start(context.Background(), "op")
	logger.InfoContext(ctx, "inside")
	span.End()
	logger.Info("outside")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %q", out.String())
	}
	var inside, outside map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &inside); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &outside); err != nil {
		t.Fatal(err)
	}
	if inside["trace_id"] != span.SpanContext().TraceID().String() || inside["span_id"] != span.SpanContext().SpanID().String() || inside["component"] != "test" {
		t.Fatalf("line logged inside the span: %v", inside)
	}
	if _, ok := outside["trace_id"]; ok {
		t.Fatalf("line logged without a span has a trace id: %v", outside)
	}
}
