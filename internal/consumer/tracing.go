package consumer

import (
	"context"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/telemetry"
)

// batchSpan traces one batch (Consumer.process, SagaConsumer.process).
//
// A batch is applied in one transaction, and its records come from many
// producers' traces, so it is traced twice over:
//
//   - the batch span, "consume <topic>": a trace of its own (a batch has as
//     many parents as records), covering dead-lettering, the transaction
//     (its statements are its children) and the offset commit, linked to
//     the trace of every record that carries one;
//   - one span per record that carries a W3C traceparent header, "process
//     <topic>", a child of that traceparent: the producer's trace continues
//     in this service, and shows when its event was applied. It is linked
//     to the batch span, where the database work is.
type batchSpan struct {
	batch     trace.Span
	records   []trace.Span
	committed bool // offsets committed
}

func (l *loop) traceBatch(ctx context.Context, msgs []kafka.Message) (context.Context, *batchSpan) {
	return l.traceBatchOf(ctx, msgs, true)
}

// traceBatchOf is traceBatch; perRecord false starts no span per record:
// the saga consumer starts its own, around each command's work
// (traceRecord).
func (l *loop) traceBatchOf(ctx context.Context, msgs []kafka.Message, perRecord bool) (context.Context, *batchSpan) {
	// With tracing off the spans are no-ops: the records' headers are not
	// read, and no span per record is started (below).
	var parents []trace.SpanContext
	var links []trace.Link
	if l.traced {
		parents = make([]trace.SpanContext, len(msgs))
		links = make([]trace.Link, 0, len(msgs))
		for i, m := range msgs {
			if parents[i] = recordSpanContext(m); parents[i].IsValid() {
				links = append(links, trace.Link{SpanContext: parents[i]})
			}
		}
	}
	ctx, batch := l.cfg.Tracer.Start(ctx, "consume "+l.cfg.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", l.cfg.Topic),
			attribute.String("messaging.consumer.group.name", l.cfg.GroupID),
			attribute.Int("messaging.batch.message_count", len(msgs)),
		))
	s := &batchSpan{batch: batch}
	if !batch.IsRecording() || !perRecord {
		return ctx, s // tracing off: no span per record either
	}
	toBatch := trace.Link{SpanContext: batch.SpanContext()}
	for i, m := range msgs {
		if !parents[i].IsValid() {
			continue
		}
		_, rec := l.cfg.Tracer.Start(trace.ContextWithRemoteSpanContext(ctx, parents[i]), "process "+l.cfg.Topic,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(toBatch),
			trace.WithAttributes(
				attribute.String("messaging.system", "kafka"),
				attribute.String("messaging.destination.name", m.Topic),
				attribute.Int("messaging.destination.partition.id", m.Partition),
				attribute.Int64("messaging.kafka.offset", m.Offset),
			))
		s.records = append(s.records, rec)
	}
	return ctx, s
}

// traceRecord starts the span of one record's own work, "process <topic>":
// a child of the record's traceparent, if it has one (else of the batch's
// span), linked to the batch's span. Its context is what the work runs
// under, so the record's trace runs on through the work's statements and
// calls, and into what the work publishes. With tracing off it starts
// nothing and returns a nil span.
func (l *loop) traceRecord(ctx context.Context, m kafka.Message, batch *batchSpan) (context.Context, trace.Span) {
	if !l.traced || !batch.batch.IsRecording() {
		return ctx, nil
	}
	parent := ctx
	if sc := recordSpanContext(m); sc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return l.cfg.Tracer.Start(parent, "process "+l.cfg.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(trace.Link{SpanContext: batch.batch.SpanContext()}),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.Int("messaging.destination.partition.id", m.Partition),
			attribute.Int64("messaging.kafka.offset", m.Offset),
		))
}

// recordSpanContext is the span context in a record's W3C trace-context
// headers; not valid when it has none.
func recordSpanContext(m kafka.Message) trace.SpanContext {
	var fields map[string]string
	for _, h := range m.Headers {
		if h.Key == telemetry.HeaderTraceparent || h.Key == telemetry.HeaderTracestate {
			if fields == nil {
				fields = make(map[string]string, 2)
			}
			fields[h.Key] = string(h.Value)
		}
	}
	return telemetry.RemoteSpanContext(fields)
}

// fail marks the batch failed.
func (s *batchSpan) fail(err error) {
	s.batch.RecordError(err)
	s.batch.SetStatus(codes.Error, err.Error())
}

// end ends every span of the batch. A batch abandoned before its offsets
// were committed (shutdown while retrying) is marked so.
func (s *batchSpan) end() {
	s.batch.SetAttributes(attribute.Bool("payment.consumer.committed", s.committed))
	if !s.committed {
		s.batch.SetStatus(codes.Error, "offsets not committed")
	}
	for _, r := range s.records {
		r.End()
	}
	s.batch.End()
}
