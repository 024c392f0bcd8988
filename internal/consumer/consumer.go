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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
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
	// BatchWait: see BatchSize. Default 10ms; NoBatchWait waits for
	// nothing: each record is handed on as it comes, a batch of one.
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
	// record that carries a W3C traceparent header (batchSpan, loop.go).
	// Nil: a no-op tracer, and the records' trace headers are not even
	// read.
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
	*loop
	apply   Applier
	decoder decoder
	metrics *metrics

	// afterApply, when set by a test, runs after a batch's transaction has
	// committed and before its offsets are committed: the window in which
	// a crash makes Kafka redeliver events that are already applied.
	afterApply func()
}

// New builds a Consumer and registers its metrics on reg. It does not
// contact the brokers; Run does.
func New(cfg Config, apply Applier, reg prometheus.Registerer, logger *slog.Logger) (*Consumer, error) {
	if _, err := domain.ParseCurrency(string(cfg.DefaultCurrency)); err != nil {
		return nil, fmt.Errorf("consumer: default currency: %w", err)
	}
	reasons := []string{ReasonInvalidJSON, ReasonInvalidEventID, ReasonUnknownEventType, ReasonInvalidAmount, ReasonInvalidField, ReasonDuplicateKey, ReasonInvalidTime, ReasonRejected}
	l, err := newLoop(cfg, "order events consumer", "order_events", reasons, []string{stepDeadLetter, stepApply, stepApplyAlone}, reg, logger)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg, l.metrics)
	if err != nil {
		return nil, err
	}
	return &Consumer{
		loop:    l,
		apply:   apply,
		decoder: decoder{defaultCurrency: l.cfg.DefaultCurrency, maxSkew: l.cfg.MaxClockSkew, now: time.Now},
		metrics: m,
	}, nil
}

// Run consumes until ctx ends, then closes the reader (leaving the group,
// so its partitions move to other members at once) and the dead-letter
// producer. A batch being applied when ctx ends is finished, or abandoned
// uncommitted if it is waiting for a retry: either way no offset is
// committed for events that are not applied. Run returns nil after a
// clean stop.
func (c *Consumer) Run(ctx context.Context) error {
	return c.run(ctx, c.process)
}

// Steps of the consumer, as the "step" label of the retries metric and in
// Health.
const (
	stepDeadLetter = "dead-lettering"
	stepApply      = "applying order events"
	stepApplyAlone = "applying an order event alone"
)

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

	// The events are applied; without the commit Kafka delivers them
	// again (after a rebalance, to whichever member owns the partition),
	// and processed_event makes that a no-op.
	c.commit(work, batch, span)
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

// metrics are the order events consumer's Prometheus series.
type metrics struct {
	*loopMetrics
	applied    prometheus.Counter
	superseded prometheus.Counter
	duplicates prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, common *loopMetrics) (*metrics, error) {
	m := &metrics{
		loopMetrics: common,
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_applied_total",
			Help: "Order events applied to order_projection for the first time (written, or recorded as superseded by a newer event).",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_superseded_total",
			Help: "Applied order events that did not change the projection because a newer event of the order was already there (out-of-order delivery).",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "order_events_duplicates_total",
			Help: "Order events skipped because processed_event already had their eventId (redelivery, R-DIST-IDEM-2).",
		}),
	}
	for _, c := range []prometheus.Collector{m.applied, m.superseded, m.duplicates} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) record(r app.ApplyResult) {
	m.applied.Add(float64(r.Written + r.Superseded))
	m.superseded.Add(float64(r.Superseded))
	m.duplicates.Add(float64(r.Duplicates))
}
