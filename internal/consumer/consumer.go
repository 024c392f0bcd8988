// Package consumer is the Kafka adapter of the order projection: a
// kafka-go consumer-group Reader on the order events topic that hands
// decoded batches to app.ApplyOrderEvents and sends records it can never
// apply to a dead-letter topic.
//
// The guarantees, and where each comes from:
//
//   - Exactly-once effect (R-DIST-IDEM-2). Offsets are committed to Kafka
//     only after the batch's database transaction has committed
//     (FetchMessage, then CommitMessages; never ReadMessage, which commits
//     before the caller has done anything). A crash between the two means
//     redelivery, and the redelivered events find their ids in
//     processed_event and are skipped. The record is per consumer group
//     (processed_event's key is (event_id, consumer_name)), so a projection
//     rebuilt under a new group applies every event again, once.
//   - Nothing lost, nothing stalled by one event. Failures are classified.
//     A failure about the system (database unreachable, a lock, a missing
//     table: anything but app.ErrDataRejected) is retried, with backoff,
//     without limit and never dead-letters anything, since every event
//     would fail alike; offsets are not committed meanwhile. When the
//     database rejects the data itself (SQLSTATE class 22 or 23), the batch
//     is applied again event by event, each in its own transaction; an event
//     rejected on each of MaxAttempts attempts goes to the dead-letter topic
//     (reason rejected-by-database, the database's error in the header) and
//     the others apply. A record that can never be applied (invalid JSON,
//     a member name repeated in one object, no event id, unknown event
//     type, invalid amount) is published to the dead-letter topic,
//     acknowledged by all in-sync replicas, before its offset is committed:
//     it does not block the partition, and it is not dropped. The
//     dead-letter producer is replaced when it stops for good (fenced). The
//     one bounded loss: a record the dead-letter topic itself refuses for
//     good (too large for it, not authorized) on each of MaxAttempts
//     attempts is given up, logged at error with its original position and
//     counted in order_events_dead_letter_refused_total; it stays in the
//     original topic until that topic's retention. Alert on any increase. Member names
//     match exactly ("OrderId" is not "orderId"), as a case-sensitive reader
//     of the same topic matches them.
//   - Bounded work per record. The amount may be a JSON number or a decimal
//     string (parseAmount says why numbers are allowed); its text is
//     bounded (40 characters, a 2-digit exponent) before any decimal
//     arithmetic, so a hostile amount costs what a valid one does.
//   - Order. A fetched batch holds each partition's records in offset
//     order, and batches are applied one after the other. The projection
//     keeps each order's newest event by (occurredAt, eventId), so even
//     records that arrive out of order cannot roll it back. That makes a
//     future date dangerous (one event dated 2999 would win over every
//     real event of its order), so an occurredAt more than MaxClockSkew
//     ahead of this consumer's clock, or before 2000, is poison.
//   - Throughput. One transaction per fetched batch (up to BatchSize
//     records), with one multi-row statement per table; one offset commit
//     per batch.
//
// Metrics (on the service's registry): order_events_applied_total,
// order_events_superseded_total, order_events_duplicates_total,
// order_events_dead_lettered_total{reason}, order_events_retries_total{step},
// order_events_offset_commit_failures_total,
// order_events_dead_letter_refused_total and order_events_consumer_lag.
// Health reports a batch that is being retried; the service shows it on
// /health and as payment_component_healthy{component="order-consumer"}, and
// keeps it out of /readyz (the payment API does not need the consumer).
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/backoff"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/kafka/idempotent"
)

// Config configures a Consumer. Brokers, Topic, DLTTopic and GroupID are
// required; the rest default as documented (the configuration table of
// docs/operations.md gives the service's defaults).
type Config struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string
	// Topic is the order events topic (ORDER_EVENTS_TOPIC).
	Topic string
	// DLTTopic is the dead-letter topic (ORDER_EVENTS_DLT_TOPIC); it must
	// exist.
	DLTTopic string
	// GroupID is the consumer group, and the consumer_name recorded in
	// processed_event.
	GroupID string
	// DefaultCurrency is used for events without a currency (the style
	// guide's OrderCreatedEvent has none).
	DefaultCurrency domain.Currency
	// MaxClockSkew is how far ahead of this consumer's clock an event's
	// occurredAt may be; a later one is poison (see decoder). Default 5m.
	MaxClockSkew time.Duration

	// MaxWait bounds how long a fetch waits for new records. It also
	// bounds how long Close and a rebalance wait for an in-flight fetch.
	MaxWait time.Duration
	// HeartbeatInterval and SessionTimeout are the group membership
	// timers: a member that sends no heartbeat for SessionTimeout is
	// considered dead and its partitions are reassigned.
	HeartbeatInterval time.Duration
	// SessionTimeout: see HeartbeatInterval.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the group waits for members to rejoin
	// during a rebalance. Defaults to kafka-go's 30s.
	RebalanceTimeout time.Duration

	// BatchSize caps the records applied in one transaction. BatchWait is
	// how long to wait for more records once one has arrived, to fill a
	// batch when records trickle in.
	BatchSize int
	// BatchWait: see BatchSize.
	BatchWait time.Duration

	// RetryBackoff is the first pause after a failed attempt (database or
	// dead-letter topic unavailable); it doubles per attempt up to
	// MaxRetryBackoff.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between retries.
	MaxRetryBackoff time.Duration
	// MaxAttempts is how often one event the database rejects for good
	// (app.ErrDataRejected) is tried, alone, before it goes to the
	// dead-letter topic. Failures about the system (database unreachable,
	// a missing table) never count: they are retried without limit.
	// Default 5.
	MaxAttempts int

	// Dialer, if set, opens the reader's broker connections (tests use it
	// to cut the network).
	Dialer *kafka.Dialer

	// Tracer, if set, traces each batch and continues the trace of each
	// record that carries a W3C traceparent header (tracing.go). Nil: a
	// no-op tracer, and the records' trace headers are not even read.
	Tracer trace.Tracer
}

// Applier is the use case a batch is handed to: app.ApplyOrderEvents.
type Applier interface {
	// Handle applies the batch in one transaction, each event at most once
	// per consumer; on error nothing is applied.
	Handle(ctx context.Context, events []app.OrderCreated) (app.ApplyResult, error)
}

// Consumer consumes the order events topic until its context ends.
type Consumer struct {
	cfg    Config
	reader *kafka.Reader
	// dlt is replaced by a new producer built from dltConfig when it stops
	// for good (idempotent.ErrFatal). Only Run's goroutine uses it.
	dlt       *idempotent.Producer
	dltConfig idempotent.Config
	apply     Applier
	decoder   decoder
	traced    bool // Config.Tracer was set: read the records' trace context
	metrics   *metrics
	logger    *slog.Logger

	mu    sync.Mutex
	state error // nil while healthy; see Health

	// afterApply, when set by a test, runs after a batch's transaction has
	// committed and before its offsets are committed: the window in which
	// a crash makes Kafka redeliver events that are already applied.
	afterApply func()
}

// errNotRunning is the state before Run and after it returns.
var errNotRunning = errors.New("order events consumer is not running")

// New builds a Consumer and registers its metrics on reg. It does not
// contact the brokers; Run does.
func New(cfg Config, apply Applier, reg prometheus.Registerer, logger *slog.Logger) (*Consumer, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.DLTTopic == "" || cfg.GroupID == "" {
		return nil, errors.New("consumer: brokers, topic, dead-letter topic and group are required")
	}
	if _, err := domain.ParseCurrency(string(cfg.DefaultCurrency)); err != nil {
		return nil, fmt.Errorf("consumer: default currency: %w", err)
	}
	setDefault(&cfg.MaxClockSkew, 5*time.Minute)
	setDefault(&cfg.MaxWait, 500*time.Millisecond)
	setDefault(&cfg.HeartbeatInterval, 3*time.Second)
	setDefault(&cfg.SessionTimeout, 45*time.Second)
	setDefault(&cfg.BatchWait, 10*time.Millisecond)
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
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:       cfg,
		dlt:       dlt,
		dltConfig: dltConfig,
		apply:     apply,
		decoder:   decoder{defaultCurrency: cfg.DefaultCurrency, maxSkew: cfg.MaxClockSkew, now: time.Now},
		traced:    traced,
		metrics:   m,
		logger:    logger.With("component", "order-events-consumer", "topic", cfg.Topic, "group", cfg.GroupID),
		state:     errNotRunning,
	}
	c.reader = kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers,
		GroupID: cfg.GroupID,
		Topic:   cfg.Topic,
		Dialer:  cfg.Dialer,
		// Prefetch a full batch while the previous one is being applied.
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
		// first deploy.
		StartOffset: kafka.FirstOffset,
		// kafka-go's default 5 s makes a restart during a broker hiccup
		// needlessly slow.
		JoinGroupBackoff: cfg.RetryBackoff,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			c.logger.Warn("kafka reader: " + fmt.Sprintf(msg, args...))
		}),
	})
	if err := m.registerLag(reg, c.reader); err != nil {
		return nil, err
	}
	return c, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Health is nil while the consumer runs and its last attempt succeeded. It
// reports the last error while a batch is being retried (database or
// dead-letter topic down), and errNotRunning before Run and after it.
func (c *Consumer) Health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Consumer) setState(err error) {
	c.mu.Lock()
	c.state = err
	c.mu.Unlock()
}

// Run consumes until ctx ends, then closes the reader (leaving the group,
// so its partitions move to other members at once) and the dead-letter
// producer. A batch being applied when ctx ends is finished, or abandoned
// uncommitted if it is waiting for a retry: either way no offset is
// committed for events that are not applied. Run returns nil after a
// clean stop.
func (c *Consumer) Run(ctx context.Context) error {
	c.setState(nil)
	c.logger.Info("consuming order events")
	defer func() {
		c.setState(errNotRunning)
		err := errors.Join(c.reader.Close(), c.dlt.Close())
		c.logger.Info("order events consumer stopped", "err", err)
	}()
	for ctx.Err() == nil {
		batch, err := c.fetchBatch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.logger.Warn("fetching order events failed", "err", err)
			if len(batch) == 0 {
				c.setState(fmt.Errorf("order events consumer: fetching: %w", err))
				if !backoff.Sleep(ctx, backoff.Jitter(c.cfg.RetryBackoff)) {
					return nil
				}
				continue
			}
		}
		c.process(ctx, batch)
	}
	return nil
}

// fetchBatch waits for one record, then takes whatever else arrives within
// BatchWait, up to BatchSize. Records of one partition come in offset order.
func (c *Consumer) fetchBatch(ctx context.Context) ([]kafka.Message, error) {
	first, err := c.reader.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	batch := make([]kafka.Message, 1, c.cfg.BatchSize)
	batch[0] = first
	fill, cancel := context.WithTimeout(ctx, c.cfg.BatchWait)
	defer cancel()
	for len(batch) < c.cfg.BatchSize {
		m, err := c.reader.FetchMessage(fill)
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

// Steps of the consumer, as the "step" label of the retries metric and in
// Health.
const (
	stepDeadLetter = "dead-lettering"
	stepApply      = "applying order events"
	stepApplyAlone = "applying an order event alone"
)

// deadRecord is a record bound for the dead-letter topic, and why.
type deadRecord struct {
	msg    kafka.Message
	reason *PoisonError
}

// process applies one batch and commits its offsets. It returns when the
// offsets are committed (or the commit failed, which only means
// redelivery), or when ctx ends while it waits to retry.
func (c *Consumer) process(ctx context.Context, batch []kafka.Message) {
	ctx, span := c.traceBatch(ctx, batch)
	defer span.end()

	events := make([]app.OrderCreated, 0, len(batch))
	origins := make([]kafka.Message, 0, len(batch)) // origins[i] carried events[i]
	var poisoned []deadRecord
	for _, m := range batch {
		e, err := c.decoder.decode(m.Value)
		var pe *PoisonError
		if errors.As(err, &pe) {
			poisoned = append(poisoned, deadRecord{msg: m, reason: pe})
			continue
		}
		events, origins = append(events, e), append(origins, m)
	}

	// Work on a started batch is not cut short by shutdown: each attempt
	// runs to its end, so a transaction is never rolled back half-way for
	// no reason. Only the waits between attempts end with ctx.
	work := context.WithoutCancel(ctx)
	if err := c.deadLetterAll(ctx, work, poisoned); err != nil {
		return
	}
	res, rejected, err := c.applyBatch(ctx, work, events, origins)
	if err != nil {
		return
	}
	if err := c.deadLetterAll(ctx, work, rejected); err != nil {
		return
	}
	// The batch is through: a record given up on its last attempt leaves
	// no failure to report.
	c.setState(nil)
	c.metrics.record(res)
	if c.afterApply != nil {
		c.afterApply()
	}

	commit, cancel := context.WithTimeout(work, 10*time.Second)
	defer cancel()
	if err := c.reader.CommitMessages(commit, batch...); err != nil {
		// The events are applied; without the commit Kafka delivers them
		// again (after a rebalance, to whichever member owns the
		// partition), and processed_event makes that a no-op. The next
		// batch's commit supersedes this one.
		c.metrics.commitFailures.Inc()
		c.logger.Warn("committing offsets failed; the batch will be redelivered and skipped", "records", len(batch), "err", err)
		span.fail(err)
		return
	}
	span.committed = true
}

// applyBatch applies events in one transaction, retrying failures that are
// about the system (database unreachable, locks, a missing table: anything
// but app.ErrDataRejected) without limit. When the database rejects the
// data itself, the batch cannot tell which event it was: each event is then
// applied alone, in its own transaction and in partition order, and an
// event the database keeps rejecting for MaxAttempts attempts is returned
// in rejected, bound for the dead-letter topic, so that one bad event does
// not stall its partition and everything behind it. It returns an error
// only when ctx ends.
func (c *Consumer) applyBatch(ctx, work context.Context, events []app.OrderCreated, origins []kafka.Message) (app.ApplyResult, []deadRecord, error) {
	if len(events) == 0 {
		return app.ApplyResult{}, nil, nil
	}
	res, err := c.apply1(ctx, work, stepApply, 1, events)
	if !errors.Is(err, app.ErrDataRejected) {
		return res, nil, err
	}
	c.logger.Warn("the database rejected a batch; applying its events one by one", "records", len(events), "err", err)
	var total app.ApplyResult
	var rejected []deadRecord
	for i, e := range events {
		res, err := c.apply1(ctx, work, stepApplyAlone, c.cfg.MaxAttempts, []app.OrderCreated{e})
		switch {
		case err == nil:
			total.Duplicates += res.Duplicates
			total.Superseded += res.Superseded
			total.Written += res.Written
		case errors.Is(err, app.ErrDataRejected):
			rejected = append(rejected, deadRecord{msg: origins[i], reason: &PoisonError{Reason: ReasonRejected, Detail: err.Error()}})
		default:
			return app.ApplyResult{}, nil, err
		}
	}
	return total, rejected, nil
}

// apply1 applies events in one transaction, with retries: it returns nil,
// ctx's error, or app.ErrDataRejected once the database has rejected the
// data maxRejections times.
func (c *Consumer) apply1(ctx, work context.Context, step string, maxRejections int, events []app.OrderCreated) (app.ApplyResult, error) {
	var res app.ApplyResult
	err := c.retry(ctx, step, func(err error) bool { return errors.Is(err, app.ErrDataRejected) }, maxRejections, func() error {
		attempt, cancel := context.WithTimeout(work, 30*time.Second)
		defer cancel()
		var err error
		res, err = c.apply.Handle(attempt, events)
		return err
	})
	return res, err
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
// order_events_dead_letter_refused_total (alert on any increase), and its
// offset is committed with the batch: it is then only in the original
// topic, at the logged offset, until that topic's retention removes it.
// Stalling the partition behind it instead would stop every later order.
func (c *Consumer) deadLetterAll(ctx, work context.Context, recs []deadRecord) error {
	if len(recs) == 0 {
		return nil
	}
	if len(recs) > 1 {
		err := c.publishDeadLetters(ctx, work, 1, recs)
		if !errors.Is(err, idempotent.ErrRefused) {
			return err
		}
	}
	for _, r := range recs {
		err := c.publishDeadLetters(ctx, work, c.cfg.MaxAttempts, []deadRecord{r})
		switch {
		case err == nil:
		case errors.Is(err, idempotent.ErrRefused):
			c.metrics.deadLetterRefused.Inc()
			c.logger.Error("the dead-letter topic refuses a record for good; giving it up: it stays only in the original topic",
				"dlt", c.cfg.DLTTopic, "topic", r.msg.Topic, "partition", r.msg.Partition, "offset", r.msg.Offset,
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
func (c *Consumer) publishDeadLetters(ctx, work context.Context, maxRefusals int, recs []deadRecord) error {
	refused := func(err error) bool { return errors.Is(err, idempotent.ErrRefused) }
	err := c.retry(ctx, stepDeadLetter, refused, maxRefusals, func() error {
		err := c.deadLetter(work, recs)
		if errors.Is(err, idempotent.ErrFatal) {
			c.renewDeadLetterProducer(err)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, r := range recs {
		c.metrics.deadLettered.WithLabelValues(r.reason.Reason).Inc()
	}
	return nil
}

// renewDeadLetterProducer replaces a producer that stopped for good, as the
// outbox relay does with its own: the fenced one would return the same
// error for every later record. A new one is as safe (R-DIST-IDEM-X2): it
// starts a new producer id and sequence space, and the records it resends
// carry their origin headers, so a copy is recognisable.
func (c *Consumer) renewDeadLetterProducer(cause error) {
	_ = c.dlt.Close()
	p, err := idempotent.New(c.dltConfig)
	if err != nil { // only a configuration error, which New checked already
		c.logger.Error("building a new dead-letter producer failed", "err", err)
		return
	}
	c.dlt = p
	c.logger.Warn("the dead-letter producer stopped for good; replaced it", "cause", cause)
}

// retry runs fn until it succeeds, waiting with exponential backoff and
// jitter in between, and reports the failure in Health meanwhile. Failures
// for which final is true are counted, and the maxFinal-th is returned;
// every other failure is retried without limit. It returns ctx's error if
// ctx ends first.
func (c *Consumer) retry(ctx context.Context, what string, final func(error) bool, maxFinal int, fn func() error) error {
	pause := backoff.New(c.cfg.RetryBackoff, c.cfg.MaxRetryBackoff)
	finals := 0
	for {
		err := fn()
		if err == nil {
			c.setState(nil)
			return nil
		}
		c.setState(fmt.Errorf("order events consumer: %s: %w", what, err))
		if final(err) {
			if finals++; finals >= maxFinal {
				return err
			}
		}
		c.metrics.retries.WithLabelValues(what).Inc()
		wait := pause.Next()
		c.logger.Warn(what+" failed; retrying", "err", err, "backoff", wait)
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
func (c *Consumer) deadLetter(ctx context.Context, recs []deadRecord) error {
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
			idempotent.Header{Key: HeaderConsumerGroup, Value: []byte(c.cfg.GroupID)},
		)
		out[i] = idempotent.Message{Key: m.Key, Value: m.Value, Headers: headers}
		c.logger.Warn("dead-lettering an order event", "partition", m.Partition, "offset", m.Offset,
			"reason", reason.Reason, "detail", reason.Detail)
	}
	attempt, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.dlt.Publish(attempt, out...)
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
