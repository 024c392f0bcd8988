package http_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// tracedService runs the service with tracing on, its spans going to an
// in-memory exporter (synchronously, so a span is there once it ended),
// and its log captured.
func tracedService(t *testing.T, env map[string]string) (*testService, *tracetest.InMemoryExporter, *servicetest.LogBuffer) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	logs := &servicetest.LogBuffer{}
	s := startServiceWith(t, testdb.New(t), env, sandboxprovider.Config{}, func(o *startOptions) {
		o.service = append(o.service, service.WithTracerProvider(provider))
		o.logs = logs
	})
	return s, exporter, logs
}

// One charge is one trace, continued from the caller's traceparent: the
// request's server span, the three phases of ChargePayment (claim, the
// provider call, record) with the database statements under the two
// database phases, and the published event carries that same trace in its
// headers; the relay's publish span links to it. The log line of the
// request carries its trace and span ids.
func TestOneChargeIsOneTraceIntoTheEventHeaders(t *testing.T) {
	t.Parallel()
	env, brokers, _ := consumerEnv(t)
	topic := kafkatest.CreateTopic(t, brokers, 3)
	env["PAYMENT_EVENTS_TOPIC"] = topic
	env["OUTBOX_POLL_INTERVAL"] = "5m" // the commit's NOTIFY wakes the relay
	s, exporter, logs := tracedService(t, env)
	s.addOrder(t, 1001, 42, "100.50", "RUB")

	// The caller's own span, as an upstream service would send it.
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID(uuid.New()), SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	traceparent := "00-" + caller.TraceID().String() + "-" + caller.SpanID().String() + "-01"
	r := s.request(t, http.MethodPost, "/payments", chargeBody(1001, 42, "100.50", "RUB", "pi_traced"),
		map[string]string{"Idempotency-Key": "traced-1", "traceparent": traceparent})
	if r.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}

	// The event on the topic carries the request's trace.
	recs := waitRecords(t, brokers, topic, 1)
	headers := map[string]string{}
	for _, h := range recs[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	if got := traceIDOf(headers["traceparent"]); got != caller.TraceID().String() {
		t.Fatalf("event headers %v: traceparent of trace %q, want the request's trace %s", headers, got, caller.TraceID())
	}
	var stored string
	if err := s.db.QueryRow(context.Background(), `SELECT trace_context::text FROM outbox_event`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stored, headers["traceparent"]) {
		t.Fatalf("outbox row's trace_context %s, record's traceparent %s", stored, headers["traceparent"])
	}

	// The spans of the request's trace.
	spans := waitSpans(t, exporter, func(ss tracetest.SpanStubs) bool {
		return findSpan(ss, "outbox publish") != nil && findSpan(ss, "POST /payments") != nil
	})
	server := findSpan(spans, "POST /payments")
	if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID() != caller.SpanID() || server.SpanContext.TraceID() != caller.TraceID() {
		t.Fatalf("server span %s: kind %v, parent %v; want a server span under the caller's %v", server.Name, server.SpanKind, server.Parent, caller)
	}
	if route := attr(server.Attributes, "http.route"); route != "/payments" {
		t.Errorf("server span http.route %q", route)
	}
	inTrace := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		if sp.SpanContext.TraceID() == caller.TraceID() {
			inTrace[sp.SpanContext.SpanID().String()] = sp
		}
	}
	for _, phase := range []string{"charge claim", "provider charge", "charge record"} {
		sp := findSpan(spans, phase)
		if sp == nil {
			t.Fatalf("no %q span; spans: %v", phase, names(spans))
		}
		if sp.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Errorf("%q is not a child of the request's span", phase)
		}
		if phase == "provider charge" {
			if sp.SpanKind != trace.SpanKindClient || attr(sp.Attributes, "payment.provider.outcome") != "approved" {
				t.Errorf("provider span: kind %v, attributes %v", sp.SpanKind, sp.Attributes)
			}
			continue
		}
		// Each database phase has its statements as children: one each, a
		// round trip atomic without a transaction around it (decision 0015).
		// The request's first statement may open a connection too, a span
		// with no statement.
		var statements []string
		for _, child := range inTrace {
			if child.Parent.SpanID() == sp.SpanContext.SpanID() && attr(child.Attributes, "db.system.name") == "postgresql" &&
				attr(child.Attributes, "db.query.text") != "" {
				statements = append(statements, attr(child.Attributes, "db.query.text"))
			}
		}
		switch {
		case phase == "charge claim" && (len(statements) != 1 || !containsText(statements, "INSERT INTO idempotency_record")):
			t.Errorf("%q has statements %q, want the one claim statement", phase, statements)
		case phase == "charge record" && (len(statements) != 1 || !containsText(statements, "INSERT INTO outbox_event")):
			t.Errorf("%q has statements %q, want the one record statement", phase, statements)
		}
	}

	publish := findSpan(spans, "outbox publish")
	if publish.SpanKind != trace.SpanKindProducer || len(publish.Links) != 1 || publish.Links[0].SpanContext.TraceID() != caller.TraceID() {
		t.Fatalf("publish span: kind %v, links %v; want a producer span linked to the request's trace", publish.SpanKind, publish.Links)
	}
	if got := traceIDOf(headers["traceparent"]); publish.Links[0].SpanContext.SpanID().String() != strings.Split(headers["traceparent"], "-")[2] || got != caller.TraceID().String() {
		t.Errorf("publish links %v, record traceparent %s", publish.Links[0].SpanContext, headers["traceparent"])
	}

	// The request's log line names its trace and span.
	line := logLine(t, logs, `"msg":"http request"`)
	if line["trace_id"] != caller.TraceID().String() || line["span_id"] != server.SpanContext.SpanID().String() {
		t.Errorf("request log line %v: want trace_id %s span_id %s", line, caller.TraceID(), server.SpanContext.SpanID())
	}
}

// An order event that carries a traceparent header continues that trace in
// the consumer: a "process" span under the record's span, linked to the
// batch's span, whose children are the batch's database statements.
func TestOrderEventTraceparentContinuesInTheConsumer(t *testing.T) {
	t.Parallel()
	env, brokers, topic := consumerEnv(t)
	s, exporter, _ := tracedService(t, env)

	producer := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID(uuid.New()), SpanID: trace.SpanID{8, 7, 6, 5, 4, 3, 2, 1}, TraceFlags: trace.FlagsSampled,
	})
	value := `{"eventId":"` + uuid.Must(uuid.NewV7()).String() + `","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,` +
		`"amount":"100.50","currency":"RUB","occurredAt":"2026-11-29T10:00:00Z"}`
	p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.Publish(ctx, idempotent.Message{Key: []byte("1001"), Value: []byte(value), Headers: []idempotent.Header{
		{Key: "traceparent", Value: []byte("00-" + producer.TraceID().String() + "-" + producer.SpanID().String() + "-01")},
	}})
	if err != nil {
		t.Fatal(err)
	}

	spans := waitSpans(t, exporter, func(ss tracetest.SpanStubs) bool { return findSpan(ss, "process "+topic) != nil })
	process := findSpan(spans, "process "+topic)
	if process.SpanKind != trace.SpanKindConsumer || process.Parent.TraceID() != producer.TraceID() || process.Parent.SpanID() != producer.SpanID() {
		t.Fatalf("process span: kind %v, parent %v; want a consumer span under the record's %v", process.SpanKind, process.Parent, producer)
	}
	batch := findSpan(spans, "consume "+topic)
	if batch == nil || len(process.Links) != 1 || process.Links[0].SpanContext.SpanID() != batch.SpanContext.SpanID() {
		t.Fatalf("process span links %v, batch span %v", process.Links, batch)
	}
	if len(batch.Links) != 1 || batch.Links[0].SpanContext.TraceID() != producer.TraceID() || attr(batch.Attributes, "payment.consumer.committed") != "true" {
		t.Fatalf("batch span: links %v, attributes %v", batch.Links, batch.Attributes)
	}
	statements := 0
	for _, sp := range spans {
		if sp.Parent.SpanID() == batch.SpanContext.SpanID() && attr(sp.Attributes, "db.system.name") == "postgresql" {
			statements++
		}
	}
	if statements == 0 {
		t.Fatal("the batch span has no database statements under it")
	}
	if n := s.count(t, `SELECT count(*) FROM order_projection WHERE order_id = 1001`); n != 1 {
		t.Fatalf("the traced event was not applied: %d projection rows for order 1001", n)
	}
}

// With tracing off (no OTEL_* endpoint: the service's default), nothing
// carries a trace: not the outbox row, not the record's headers, even when
// the caller sends a traceparent.
func TestTracingOffCarriesNoTraceContext(t *testing.T) {
	t.Parallel()
	env, brokers, _ := consumerEnv(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)
	env["PAYMENT_EVENTS_TOPIC"] = topic
	env["OUTBOX_POLL_INTERVAL"] = "5m"
	s := startService(t, env)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	r := s.request(t, http.MethodPost, "/payments", chargeBody(1001, 42, "100.50", "RUB", "pi_untraced"),
		map[string]string{"Idempotency-Key": "untraced-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if r.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	recs := waitRecords(t, brokers, topic, 1)
	for _, h := range recs[0].Headers {
		if h.Key == "traceparent" || h.Key == "tracestate" {
			t.Fatalf("tracing off, yet the record has %s: %s", h.Key, h.Value)
		}
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE trace_context IS NOT NULL`); n != 0 {
		t.Fatalf("tracing off, yet %d outbox rows have a trace context", n)
	}
}

// waitRecords waits for want records of the payment events topic and
// returns them, each held to api/asyncapi.yaml.
func waitRecords(t *testing.T, brokers []string, topic string, want int) []kafkatest.Record {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs := kafkatest.ReadAll(t, brokers, topic, 30*time.Second)
		if len(recs) >= want {
			asyncapitest.ValidateRecords(t, "payment.events", recs)
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records on %s after 60s, want %d", len(recs), topic, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitSpans(t *testing.T, exporter *tracetest.InMemoryExporter, done func(tracetest.SpanStubs) bool) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans := exporter.GetSpans()
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans not there after 60s; have %v", names(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func findSpan(spans tracetest.SpanStubs, name string) *tracetest.SpanStub {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Name
	}
	return out
}

func attr(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// traceIDOf is the trace id of a W3C traceparent, "" if malformed.
func traceIDOf(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 {
		return ""
	}
	return parts[1]
}

// logLine returns the first JSON log line in logs containing substr.
func logLine(t *testing.T, logs *servicetest.LogBuffer, substr string) map[string]any {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no log line with %s", substr)
	return nil
}

func containsText(statements []string, text string) bool {
	for _, s := range statements {
		if strings.Contains(s, text) {
			return true
		}
	}
	return false
}
