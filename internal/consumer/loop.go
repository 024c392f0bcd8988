package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/backoff"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/telemetry"
)

// loop is what the service's two consumers share: the consumer-group
// reader, fetched in batches; the dead-letter producer, and the records
// sent to it before their offsets are committed; retries with backoff;
// Health; the batch's trace; and the offset commit once a batch's work is
// done. Consumer (the order events) and SagaConsumer (the payment
// commands) each add what they do with a batch.
type loop struct {
	cfg    Config
	what   string // the consumer, in logs and Health: "order events consumer"
	reader *kafka.Reader
	// dlt is replaced by a new producer built from dltConfig when it stops
	// for good (idempotent.ErrFatal). Only Run's goroutine uses it.
	dlt       *idempotent.Producer
	dltConfig idempotent.Config
	traced    bool // Config.Tracer was set: read the records' trace context
	metrics   *loopMetrics
	logger    *slog.Logger
	// drain, if set, waits for the work run handed on to end: run calls
	// it before it closes the reader.
	drain func()

	mu    sync.Mutex
	state error // nil while healthy; see Health
}

// errNotRunning is the state before Run and after it returns.
var errNotRunning = errors.New("the consumer is not running")

// newLoop checks and completes cfg's common part, and builds the reader,
// the dead-letter producer and the metrics named prefix_* (with zeros for
// the dead-letter reasons and retried steps given). It does not contact
// the brokers.
func newLoop(cfg Config, what, prefix string, reasons, steps []string, reg prometheus.Registerer, logger *slog.Logger) (*loop, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.DLTTopic == "" || cfg.GroupID == "" {
		return nil, fmt.Errorf("%s: brokers, topic, dead-letter topic and group are required", what)
	}
	setDefault(&cfg.MaxClockSkew, 5*time.Minute)
	setDefault(&cfg.MaxWait, 500*time.Millisecond)
	setDefault(&cfg.HeartbeatInterval, 3*time.Second)
	setDefault(&cfg.SessionTimeout, 45*time.Second)
	if cfg.BatchWait == 0 {
		cfg.BatchWait = 10 * time.Millisecond
	}
	setDefault(&cfg.RetryBackoff, 100*time.Millisecond)
	setDefault(&cfg.MaxRetryBackoff, 10*time.Second)
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	traced := cfg.Tracer != nil
	if !traced {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	dltConfig := idempotent.Config{
		Brokers:  cfg.Brokers,
		Topic:    cfg.DLTTopic,
		ClientID: cfg.GroupID + "-dlt",
	}
	dlt, err := idempotent.New(dltConfig)
	if err != nil {
		return nil, err
	}
	m, err := newLoopMetrics(reg, prefix, what, reasons, steps)
	if err != nil {
		return nil, err
	}
	l := &loop{
		cfg:       cfg,
		what:      what,
		dlt:       dlt,
		dltConfig: dltConfig,
		traced:    traced,
		metrics:   m,
		logger:    logger.With("component", strings.ReplaceAll(what, " ", "-"), "topic", cfg.Topic, "group", cfg.GroupID),
		state:     fmt.Errorf("%s: %w", what, errNotRunning),
	}
	l.reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers,
		GroupID: cfg.GroupID,
		Topic:   cfg.Topic,
		Dialer:  cfg.Dialer,
		// Prefetch a full batch while the previous one is being handled.
		QueueCapacity:     max(100, cfg.BatchSize),
		MinBytes:          1,
		MaxBytes:          10 << 20,
		MaxWait:           cfg.MaxWait,
		HeartbeatInterval: cfg.HeartbeatInterval,
		SessionTimeout:    cfg.SessionTimeout,
		RebalanceTimeout:  cfg.RebalanceTimeout,
		// Commits are synchronous: CommitMessages returns once the broker
		// has them. With an interval, a crash would lose commits we have
		// already counted on.
		CommitInterval: 0,
		// A new group starts at the beginning of the topic: the
		// projection needs every order, not only those created after the
		// first deploy, and no command may be skipped.
		StartOffset: kafka.FirstOffset,
		// kafka-go's default 5 s makes a restart during a broker hiccup
		// needlessly slow.
		JoinGroupBackoff: cfg.RetryBackoff,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			l.logger.Warn("kafka reader: " + fmt.Sprintf(msg, args...))
		}),
	})
	if err := m.registerLag(reg, prefix, what, l.reader); err != nil {
		return nil, err
	}
	return l, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// run fetches batches until ctx ends and hands each to process, then
// closes the reader (leaving the group, so its partitions move to other
// members at once) and the dead-letter producer.
func (l *loop) run(ctx context.Context, process func(ctx context.Context, batch []kafka.Message)) error {
	l.setState(nil)
	l.logger.Info("consuming " + l.cfg.Topic)
	defer func() {
		if l.drain != nil {
			l.drain()
		}
		l.setState(fmt.Errorf("%s: %w", l.what, errNotRunning))
		err := errors.Join(l.reader.Close(), l.dlt.Close())
		l.logger.Info(l.what+" stopped", "err", err)
	}()
	for ctx.Err() == nil {
		batch, err := l.fetchBatch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			l.logger.Warn("fetching failed", "err", err)
			if len(batch) == 0 {
				l.setState(fmt.Errorf("%s: fetching: %w", l.what, err))
				if !backoff.Sleep(ctx, backoff.Jitter(l.cfg.RetryBackoff)) {
					return nil
				}
				continue
			}
		}
		process(ctx, batch)
	}
	return nil
}

// commit commits a handled batch's offsets. A failure only means
// redelivery: the records are handled, and handling them again is a no-op
// (processed_event, the steps' keys); the next batch's commit supersedes
// this one.
func (l *loop) commit(work context.Context, batch []kafka.Message, span *batchSpan) {
	commit, cancel := context.WithTimeout(work, 10*time.Second)
	defer cancel()
	if err := l.reader.CommitMessages(commit, batch...); err != nil {
		l.metrics.commitFailures.Inc()
		l.logger.Warn("committing offsets failed; the batch will be redelivered and skipped", "records", len(batch), "err", err)
		span.fail(err)
		return
	}
	span.committed = true
}

// Health is nil while the consumer runs and its last attempt succeeded. It
// reports the last error while a batch is being retried (database or
// dead-letter topic down), and errNotRunning before Run and after it.
func (l *loop) Health() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

func (l *loop) setState(err error) {
	l.mu.Lock()
	l.state = err
	l.mu.Unlock()
}

// NoBatchWait as Config.BatchWait hands each record on as it comes, in a
// batch of its own. A zero BatchWait is the default's.
const NoBatchWait time.Duration = -1

// fetchBatch waits for one record, then takes whatever else arrives within
// BatchWait, up to BatchSize. Records of one partition come in offset order.
func (l *loop) fetchBatch(ctx context.Context) ([]kafka.Message, error) {
	first, err := l.reader.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	if l.cfg.BatchWait < 0 {
		// kafka-go cannot take only what it has already fetched: a
		// fetch with a context that has ended returns a queued record or
		// the context's error at random. So no wait is a batch of one.
		return []kafka.Message{first}, nil
	}
	batch := make([]kafka.Message, 1, l.cfg.BatchSize)
	batch[0] = first
	fill, cancel := context.WithTimeout(ctx, l.cfg.BatchWait)
	defer cancel()
	for len(batch) < l.cfg.BatchSize {
		m, err := l.reader.FetchMessage(fill)
		if err != nil {
			if fill.Err() != nil {
				return batch, nil // BatchWait is over
			}
			return batch, err
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// deadRecord is a record bound for the dead-letter topic, and why.
type deadRecord struct {
	msg    kafka.Message
	reason *PoisonError
}

// deadLetterAll publishes recs to the dead-letter topic and counts them.
// It returns an error only when ctx ends.
//
// Failures of the topic or the network are retried without limit: the
// records' offsets are not committed before the dead-letter topic has them.
// A producer stopped for good (fenced) is replaced before the next attempt.
// A record the dead-letter topic refuses for good (too large for it, not
// authorized, a policy) cannot be helped by retrying: the records are then
// sent one by one, and one refused on each of MaxAttempts attempts is
// given up. It is logged with its position, counted in
// the consumer's dead_letter_refused_total counter (alert on any increase), and its
// offset is committed with the batch: it is then only in the original
// topic, at the logged offset, until that topic's retention removes it.
// Stalling the partition behind it instead would stop every later record.
func (l *loop) deadLetterAll(ctx, work context.Context, recs []deadRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if len(recs) > 1 {
		err := l.publishDeadLetters(ctx, work, 1, recs)
		if !errors.Is(err, idempotent.ErrRefused) {
			return err
		}
	}
	for _, r := range recs {
		err := l.publishDeadLetters(ctx, work, l.cfg.MaxAttempts, []deadRecord{r})
		switch {
		case err == nil:
		case errors.Is(err, idempotent.ErrRefused):
			l.metrics.deadLetterRefused.Inc()
			l.logger.Error("the dead-letter topic refuses a record for good; giving it up: it stays only in the original topic",
				"dlt", l.cfg.DLTTopic, "topic", r.msg.Topic, "partition", r.msg.Partition, "offset", r.msg.Offset,
				"reason", r.reason.Reason, "detail", r.reason.Detail, "err", err)
		default:
			return err
		}
	}
	return nil
}

// publishDeadLetters publishes recs with retries: it returns nil once they
// are acknowledged (and counted), ctx's error, or the idempotent.ErrRefused
// error once the topic has refused them maxRefusals times.
func (l *loop) publishDeadLetters(ctx, work context.Context, maxRefusals int, recs []deadRecord) error {
	refused := func(err error) bool { return errors.Is(err, idempotent.ErrRefused) }
	err := l.retry(ctx, stepDeadLetter, refused, maxRefusals, func() error {
		err := l.deadLetter(work, recs)
		if errors.Is(err, idempotent.ErrFatal) {
			l.renewDeadLetterProducer(err)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, r := range recs {
		l.metrics.deadLettered.WithLabelValues(r.reason.Reason).Inc()
	}
	return nil
}

// renewDeadLetterProducer replaces a producer that stopped for good, as the
// outbox relay does with its own: the fenced one would return the same
// error for every later record. A new one is as safe (R-DIST-IDEM-X2): it
// starts a new producer id and sequence space, and the records it resends
// carry their origin headers, so a copy is recognisable.
func (l *loop) renewDeadLetterProducer(cause error) {
	_ = l.dlt.Close()
	p, err := idempotent.New(l.dltConfig)
	if err != nil { // only a configuration error, which New checked already
		l.logger.Error("building a new dead-letter producer failed", "err", err)
		return
	}
	l.dlt = p
	l.logger.Warn("the dead-letter producer stopped for good; replaced it", "cause", cause)
}

// retry runs fn until it succeeds, waiting with exponential backoff and
// jitter in between, and reports the failure in Health meanwhile. Failures
// for which final is true are counted, and the maxFinal-th is returned;
// every other failure is retried without limit. It returns ctx's error if
// ctx ends first.
func (l *loop) retry(ctx context.Context, what string, final func(error) bool, maxFinal int, fn func() error) error {
	pause := backoff.New(l.cfg.RetryBackoff, l.cfg.MaxRetryBackoff)
	finals := 0
	for {
		err := fn()
		if err == nil {
			l.setState(nil)
			return nil
		}
		l.setState(fmt.Errorf("%s: %s: %w", l.what, what, err))
		if final(err) {
			if finals++; finals >= maxFinal {
				return err
			}
		}
		l.metrics.retries.WithLabelValues(what).Inc()
		wait := pause.Next()
		l.logger.Warn(what+" failed; retrying", "err", err, "backoff", wait)
		if !backoff.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// Dead-letter headers. A dead-lettered record keeps its key, value and
// headers, and gets these on top, so it can be inspected, fixed and
// replayed to the original topic.
const (
	// HeaderErrorCode is the reason, one of the Reason constants.
	HeaderErrorCode = "x-dlt-error-code"
	// HeaderErrorMessage says what was wrong, in words.
	HeaderErrorMessage = "x-dlt-error-message"
	// HeaderOriginalTopic is the topic the record was read from.
	HeaderOriginalTopic = "x-dlt-original-topic"
	// HeaderOriginalPartition is its partition, in decimal.
	HeaderOriginalPartition = "x-dlt-original-partition"
	// HeaderOriginalOffset is its offset, in decimal.
	HeaderOriginalOffset = "x-dlt-original-offset"
	// HeaderConsumerGroup is the consumer group that gave it up.
	HeaderConsumerGroup = "x-dlt-consumer-group"
)

// deadLetter publishes the records with the idempotent producer
// (R-DIST-IDEM-X2): a retried publish does not write them twice. It
// returns once all in-sync replicas have them, before any offset is
// committed. A crash after this and before the offset commit publishes
// them again; the original topic, partition and offset headers identify
// such copies.
func (l *loop) deadLetter(ctx context.Context, recs []deadRecord) error {
	out := make([]idempotent.Message, len(recs))
	for i, r := range recs {
		m, reason := r.msg, r.reason
		headers := make([]idempotent.Header, 0, len(m.Headers)+6)
		for _, h := range m.Headers {
			headers = append(headers, idempotent.Header{Key: h.Key, Value: h.Value})
		}
		headers = append(headers,
			idempotent.Header{Key: HeaderErrorCode, Value: []byte(reason.Reason)},
			idempotent.Header{Key: HeaderErrorMessage, Value: []byte(truncate(reason.Detail, maxErrorHeader))},
			idempotent.Header{Key: HeaderOriginalTopic, Value: []byte(m.Topic)},
			idempotent.Header{Key: HeaderOriginalPartition, Value: []byte(strconv.Itoa(m.Partition))},
			idempotent.Header{Key: HeaderOriginalOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
			idempotent.Header{Key: HeaderConsumerGroup, Value: []byte(l.cfg.GroupID)},
		)
		out[i] = idempotent.Message{Key: m.Key, Value: m.Value, Headers: headers}
		l.logger.Warn("dead-lettering a record", "partition", m.Partition, "offset", m.Offset,
			"reason", reason.Reason, "detail", reason.Detail)
	}
	attempt, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return l.dlt.Publish(attempt, out...)
}

// maxErrorHeader bounds the error message header: a database error can
// quote a whole row.
const maxErrorHeader = 1024

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// loopMetrics are the series every consumer has, named
// <prefix>_*: order_events_* for the order events consumer.
type loopMetrics struct {
	deadLettered   *prometheus.CounterVec
	retries        *prometheus.CounterVec
	commitFailures prometheus.Counter
	// deadLetterRefused counts records the dead-letter topic refused for
	// good and that were given up (deadLetterAll).
	deadLetterRefused prometheus.Counter
}

func newLoopMetrics(reg prometheus.Registerer, prefix, what string, reasons, steps []string) (*loopMetrics, error) {
	m := &loopMetrics{
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_dead_lettered_total",
			Help: "Records the " + what + " sent to the dead-letter topic, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_retries_total",
			Help: "Failed attempts of the " + what + " that were retried with backoff (database or dead-letter topic unavailable), by step.",
		}, []string{"step"}),
		commitFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_offset_commit_failures_total",
			Help: "Offset commits of the " + what + " that failed after the batch was handled; the batch is redelivered and skipped.",
		}),
		deadLetterRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_dead_letter_refused_total",
			Help: "Records the dead-letter topic of the " + what + " refused for good (too large, not authorized) on every attempt, given up and left only in the original topic at the logged offset. Alert on any increase.",
		}),
	}
	for _, reason := range reasons {
		m.deadLettered.WithLabelValues(reason) // export zeros, so alerts see the series
	}
	for _, step := range steps {
		m.retries.WithLabelValues(step) // export zeros, so alerts see the series
	}
	for _, c := range []prometheus.Collector{m.deadLettered, m.retries, m.commitFailures, m.deadLetterRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// registerLag exports kafka-go's lag gauge: records between the reader's
// position and the high-water mark, as of the partition fetched last.
// kafka-go keeps one such number per reader, not one per partition.
func (m *loopMetrics) registerLag(reg prometheus.Registerer, prefix, what string, r *kafka.Reader) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: prefix + "_consumer_lag",
		Help: "Records not yet fetched on the partition the " + what + "'s reader fetched last (kafka-go Reader.Stats().Lag).",
	}, func() float64 { return float64(r.Stats().Lag) }))
}

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
