package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/example/payment-service/internal/backoff"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/telemetry"
)

// Event is one unpublished outbox row.
type Event struct {
	// ID is outbox_event.id: the publish order.
	ID int64
	// EventID is the event's eventId (R-DIST-IDEM-1), made when the row
	// was written; every publication of the row carries it.
	EventID uuid.UUID
	// Topic is where the row was addressed when it was written.
	Topic string
	// EventType is the event's type, such as PaymentSucceeded.v1.
	EventType string
	// Key is the record key (the order id).
	Key []byte
	// Payload is the record value, the bytes written in the row.
	Payload []byte
	// Age is how long the row had been waiting when it was read, by the
	// database's clock.
	Age time.Duration
	// TraceContext holds the W3C trace-context fields (traceparent,
	// tracestate) of the request that wrote the row; nil if it was not
	// traced. They are sent as record headers.
	TraceContext map[string]string
}

// Store is the relay's view of the outbox table.
type Store interface {
	// Lead blocks until this process is the relay leader, and returns the
	// session that holds the leadership. It returns an error when ctx ends
	// or the database fails.
	Lead(ctx context.Context) (Session, error)
}

// Session is one leadership term. Every call runs on the session that
// holds the leadership, so once it is lost every call fails.
type Session interface {
	// Pending returns up to limit unpublished rows of every topic, lowest
	// id first.
	Pending(ctx context.Context, limit int) ([]Event, error)
	// MarkPublished sets published_at on the rows.
	MarkPublished(ctx context.Context, ids []int64) error
	// Wait blocks until rows may have been committed (a notification
	// arrived) or ctx ends; it returns ctx's error then.
	Wait(ctx context.Context) error
	// Close ends the term and releases the leadership.
	Close() error
}

// Publisher sends messages to Kafka and returns once all of them are
// acknowledged. *idempotent.Producer implements it; ctx must have a deadline,
// since the producer retries until ctx ends.
type Publisher interface {
	// Publish returns once every message is acknowledged by all in-sync
	// replicas, or an error (each message may then be written or not).
	Publish(ctx context.Context, msgs ...idempotent.Message) error
	// Close releases the publisher.
	Close() error
}

// Config configures a Relay. Store and NewPublisher are required.
type Config struct {
	// Store reads and marks the outbox rows (repository.OutboxRelayStore).
	Store Store
	// NewPublisher creates the publisher of a topic for a leadership term,
	// when the first row for that topic comes, and again after a Publish
	// that stopped it for good (idempotent.ErrFatal: PRODUCER_FENCED). A
	// publisher whose Publish merely failed is kept: every new one costs the
	// broker a new producer id, which it holds in memory for a long time,
	// and the old one is as safe to retry with. Rows are published to the
	// topic stored in them, so a changed PAYMENT_EVENTS_TOPIC strands none.
	NewPublisher func(topic string) (Publisher, error)
	// BatchSize is the most rows read and published at once. Default 100.
	BatchSize int
	// PollInterval is the safety-net poll while no notification arrives.
	// Default 5s.
	PollInterval time.Duration
	// RetryBackoff is the first pause after a failed publish; it doubles
	// with each failure in a row up to MaxRetryBackoff, and starts over
	// after a published batch. Defaults: min(PollInterval, 1s) and 30s.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the pause between failed publishes.
	MaxRetryBackoff time.Duration
	// PublishTimeout bounds one batch's Publish. Default 30s.
	PublishTimeout time.Duration
	// QueryTimeout bounds each database call of the leader. Default 10s.
	QueryTimeout time.Duration
	// Metrics, if set, gets the relay's counters and gauges.
	Metrics *Metrics
	// Logger gets the relay's leadership changes and failures.
	Logger *slog.Logger
	// Tracer, if set, makes each batch's publish a producer span linked to
	// the requests that wrote its events. Nil: a no-op tracer, and no links
	// are made.
	Tracer trace.Tracer
}

// Relay publishes the outbox. Run it in every replica: only the leader
// publishes, the others wait to take over.
type Relay struct {
	cfg    Config
	traced bool // Config.Tracer was set: link each publish to its events' traces

	mu    sync.Mutex
	state error // see Health
	// What Flush waits for: whether this relay leads, and when the last
	// read that found the whole backlog (less than a full batch, all of it
	// published and marked) began. changed is closed and replaced when
	// either changes.
	leading  bool
	caughtUp time.Time
	changed  chan struct{}
	// Flush ends the leader's wait for notifications early: it calls
	// cancelWait during the wait, or sets readNow for the next one.
	cancelWait context.CancelFunc
	readNow    bool
}

// errRelayNotRunning is the state before Run and after it returns.
var errRelayNotRunning = errors.New("outbox relay is not running")

// Health is nil while the relay runs and nothing is failing: as the leader
// whose last batch was published, or as a standby waiting for the
// leadership. It is the last error while the leader's publishes fail or the
// relay cannot compete for the leadership (database unreachable), and an
// error before Run and after it. It is for monitoring (the service exports
// it as payment_component_healthy and on /health); readiness does not
// include it, since the payment API does not need the relay.
func (r *Relay) Health() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *Relay) setState(err error) {
	r.mu.Lock()
	r.state = err
	r.mu.Unlock()
}

// New validates cfg and returns a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Store == nil || cfg.NewPublisher == nil {
		return nil, errors.New("outbox: Store and NewPublisher are required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = min(cfg.PollInterval, time.Second)
	}
	if cfg.MaxRetryBackoff <= 0 {
		cfg.MaxRetryBackoff = 30 * time.Second
	}
	cfg.MaxRetryBackoff = max(cfg.MaxRetryBackoff, cfg.RetryBackoff)
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 30 * time.Second
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	traced := cfg.Tracer != nil
	if !traced {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Relay{cfg: cfg, traced: traced, state: errRelayNotRunning,
		changed: make(chan struct{})}, nil
}

// Flush returns once this relay has read the outbox after the call and
// published every row it found: what committed before the call is on its
// topic. It returns nil at once when this relay does not lead (the
// leader, in another replica or after a restart, publishes the rows), and
// ctx's error if ctx ends first; the rows then wait in the outbox for the
// next leader, never lost. The service calls it at shutdown, after every
// writer stopped and before it stops Run, so that the events of the last
// requests leave now rather than at the next start.
func (r *Relay) Flush(ctx context.Context) error {
	start := time.Now()
	r.mu.Lock()
	if r.cancelWait != nil {
		r.cancelWait()
	} else {
		r.readNow = true
	}
	r.mu.Unlock()
	for {
		r.mu.Lock()
		leading, caughtUp, changed := r.leading, r.caughtUp, r.changed
		r.mu.Unlock()
		if !leading || !caughtUp.Before(start) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// beginWait registers cancel as the way Flush ends the coming wait for
// notifications; it returns false, and registers nothing, when a Flush
// already asked for a read.
func (r *Relay) beginWait(cancel context.CancelFunc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readNow {
		r.readNow = false
		return false
	}
	r.cancelWait = cancel
	return true
}

func (r *Relay) endWait() {
	r.mu.Lock()
	r.cancelWait = nil
	r.mu.Unlock()
}

// setLeading records a change of leadership for Flush.
func (r *Relay) setLeading(leading bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leading, r.caughtUp = leading, time.Time{}
	close(r.changed)
	r.changed = make(chan struct{})
}

// setCaughtUp records, for Flush, that a read begun at readFrom found the
// whole backlog and published it.
func (r *Relay) setCaughtUp(readFrom time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.caughtUp = readFrom
	close(r.changed)
	r.changed = make(chan struct{})
}

// Run relays until ctx ends and returns nil then. Losing the leadership or
// the database is not an error: Run steps down and competes again.
func (r *Relay) Run(ctx context.Context) error {
	defer r.setState(errRelayNotRunning)
	for {
		// Waiting for the leadership is healthy; a failure to compete
		// for it is reported when Lead returns.
		r.setState(nil)
		sess, err := r.cfg.Store.Lead(ctx)
		if ctx.Err() != nil {
			if sess != nil {
				_ = sess.Close()
			}
			return nil
		}
		if err != nil {
			r.setState(fmt.Errorf("outbox relay: cannot compete for leadership: %w", err))
			r.cfg.Logger.WarnContext(ctx, "outbox relay: cannot compete for leadership", "err", err)
		} else {
			r.cfg.Logger.InfoContext(ctx, "outbox relay: leading")
			r.cfg.Metrics.setLeader(true)
			r.setLeading(true)
			err = r.lead(ctx, sess)
			r.setLeading(false)
			r.cfg.Metrics.setLeader(false)
			_ = sess.Close()
			if ctx.Err() != nil {
				return nil
			}
			r.setState(fmt.Errorf("outbox relay: stepped down: %w", err))
			r.cfg.Logger.WarnContext(ctx, "outbox relay: stepped down", "err", err)
		}
		if !backoff.Sleep(ctx, r.retryPause()) {
			return nil
		}
	}
}

// retryPause is the pause after losing the leadership or the database:
// short, so a lone replica is back soon, and never longer than the poll.
func (r *Relay) retryPause() time.Duration { return min(r.cfg.PollInterval, time.Second) }

// lead publishes while sess holds the leadership. It returns why it stopped.
func (r *Relay) lead(ctx context.Context, sess Session) error {
	pubs := publishers{}
	defer pubs.closeAll()
	pause := backoff.New(r.cfg.RetryBackoff, r.cfg.MaxRetryBackoff)
	for {
		readFrom := time.Now()
		n, err := r.relayBatch(ctx, sess, pubs)
		var pubErr *publishError
		switch {
		case errors.As(err, &pubErr):
			// The rows stay unpublished and are read again, with the same
			// eventIds. The producer is kept unless it stopped for good
			// (see Config.NewPublisher), and the pause grows with each
			// failure in a row: a broker outage of an hour costs a few
			// hundred attempts, not thousands of producers.
			wait := pause.Next()
			r.setState(fmt.Errorf("outbox relay: publishing: %w", err))
			r.cfg.Logger.WarnContext(ctx, "outbox relay: publish failed; retrying the batch", "topic", pubErr.topics(), "err", err, "backoff", wait)
			for _, f := range pubErr.failed {
				if errors.Is(f.err, idempotent.ErrFatal) || errors.Is(f.err, idempotent.ErrClosed) {
					pubs.drop(f.topic)
				}
			}
			if !backoff.Sleep(ctx, wait) {
				return ctx.Err()
			}
			continue
		case err != nil:
			return err
		}
		pause.Reset()
		r.setState(nil)
		if n == r.cfg.BatchSize {
			continue // a full batch: there may be more
		}
		r.setCaughtUp(readFrom)
		// Sleep until a commit notifies us, the safety-net poll is due, or
		// Flush wants a read now.
		waitCtx, cancel := context.WithTimeout(ctx, r.cfg.PollInterval)
		if r.beginWait(cancel) {
			err = sess.Wait(waitCtx)
			r.endWait()
		}
		timedOut := waitCtx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !timedOut {
			return fmt.Errorf("wait for notifications: %w", err)
		}
	}
}

// publishError is a batch whose publish failed on one topic or more.
type publishError struct {
	failed []topicError // in the batch's order of topics
}

// topicError is one topic's failed publish.
type topicError struct {
	topic string
	err   error
}

func (e *publishError) Error() string {
	msgs := make([]string, len(e.failed))
	for i, f := range e.failed {
		msgs[i] = f.err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e *publishError) Unwrap() []error {
	errs := make([]error, len(e.failed))
	for i, f := range e.failed {
		errs[i] = f.err
	}
	return errs
}

// topics names the topics whose publish failed.
func (e *publishError) topics() string {
	names := make([]string, len(e.failed))
	for i, f := range e.failed {
		names[i] = f.topic
	}
	return strings.Join(names, ",")
}

// publishers are a leadership term's publishers, one per topic.
type publishers map[string]Publisher

func (ps publishers) drop(topic string) {
	if p, ok := ps[topic]; ok {
		_ = p.Close()
		delete(ps, topic)
	}
}

func (ps publishers) closeAll() {
	for topic := range ps {
		ps.drop(topic)
	}
}

// relayBatch reads, publishes and marks one batch; it returns the number
// of rows read. No transaction spans the network call.
func (r *Relay) relayBatch(ctx context.Context, sess Session, pubs publishers) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	events, err := sess.Pending(qctx, r.cfg.BatchSize)
	readAt := time.Now()
	cancel()
	if err != nil {
		return 0, fmt.Errorf("read pending events: %w", err)
	}
	if len(events) == 0 {
		r.cfg.Metrics.setLag(0)
		return 0, nil
	}
	r.cfg.Metrics.setLag(events[0].Age)

	// Each row goes to the topic stored in it. Rows of one topic keep their
	// id order; a key's rows are all in one topic (the topic a replica
	// writes does not change under it), so per-key order holds.
	byTopic := map[string][]Event{}
	var topics []string
	ids := make([]int64, len(events))
	for i, e := range events {
		if _, ok := byTopic[e.Topic]; !ok {
			topics = append(topics, e.Topic)
		}
		byTopic[e.Topic] = append(byTopic[e.Topic], e)
		ids[i] = e.ID
	}
	for _, topic := range topics {
		if _, ok := pubs[topic]; !ok {
			p, err := r.cfg.NewPublisher(topic)
			if err != nil {
				return 0, &publishError{[]topicError{{topic, fmt.Errorf("create publisher for topic %s: %w", topic, err)}}}
			}
			pubs[topic] = p
		}
	}
	// The topics are published at once, each by its own producer: a saga
	// step's outcome writes a row for payment.events and one for
	// payment.replies, and published one after the other the reply would
	// wait for the event's acknowledgement too. Each topic's rows are one
	// Publish, in id order.
	failed := make([]error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		pub, rows := pubs[topic], byTopic[topic]
		wg.Go(func() {
			if err := r.publish(ctx, pub, rows); err != nil {
				failed[i] = err
				return
			}
			r.cfg.Metrics.published(topic, len(rows))
		})
	}
	wg.Wait()
	var perr publishError
	for i, err := range failed {
		if err != nil {
			perr.failed = append(perr.failed, topicError{topics[i], fmt.Errorf("topic %s: %w", topics[i], err)})
		}
	}
	if len(perr.failed) > 0 {
		// Nothing of the batch is marked: the topics that were published
		// get their rows again with the same eventIds, which consumers
		// drop (at least once, as after a crash).
		return 0, &perr
	}
	r.cfg.Metrics.publishDelay(events, time.Since(readAt))

	// A crash or a lost session here republishes the batch under the next
	// leader, with the same eventIds: consumers dedup (see the package doc).
	qctx, cancel = context.WithTimeout(ctx, r.cfg.QueryTimeout)
	err = sess.MarkPublished(qctx, ids)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("mark %d events published: %w", len(ids), err)
	}
	if len(events) < r.cfg.BatchSize {
		// That was the whole backlog as of the read; the relay now waits,
		// and a stale age must not linger in the gauge meanwhile.
		r.cfg.Metrics.setLag(0)
	}
	return len(events), nil
}

// publish sends one batch, in a producer span of its own. The span starts
// a trace of its own (a batch has as many parents as it has events) and
// links the span that wrote each event, so the trace of a request leads to
// the publish of its event and back; the records themselves carry the
// request's trace context (toMessage).
func (r *Relay) publish(ctx context.Context, pub Publisher, events []Event) error {
	msgs := make([]idempotent.Message, len(events))
	var links []trace.Link
	for i, e := range events {
		msgs[i] = toMessage(e)
		if !r.traced {
			continue
		}
		if sc := telemetry.RemoteSpanContext(e.TraceContext); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := r.cfg.Tracer.Start(ctx, "outbox publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithNewRoot(), trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "send"),
			attribute.Int("messaging.batch.message_count", len(msgs)),
		))
	defer span.End()
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	err := pub.Publish(pctx, msgs...)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
	}
	return err
}

// Header names of the Kafka record headers every event carries, so that
// consumers can dedup and route without parsing the value.
const (
	// HeaderEventID carries the event's eventId.
	HeaderEventID = "eventId"
	// HeaderEventType carries the event's type.
	HeaderEventType = "eventType"
)

// toMessage is the record of an event: its key and payload, the eventId and
// eventType headers, and the W3C trace-context headers (traceparent,
// tracestate) of the request that wrote it, when it was traced.
func toMessage(e Event) idempotent.Message {
	headers := make([]idempotent.Header, 2, 2+len(e.TraceContext))
	headers[0] = idempotent.Header{Key: HeaderEventID, Value: []byte(e.EventID.String())}
	headers[1] = idempotent.Header{Key: HeaderEventType, Value: []byte(e.EventType)}
	for _, name := range []string{telemetry.HeaderTraceparent, telemetry.HeaderTracestate} {
		if v := e.TraceContext[name]; v != "" {
			headers = append(headers, idempotent.Header{Key: name, Value: []byte(v)})
		}
	}
	return idempotent.Message{Key: e.Key, Value: e.Payload, Headers: headers}
}

// The idempotent producer (R-DIST-IDEM-X2) is the Publisher in production.
var _ Publisher = (*idempotent.Producer)(nil)

// WakeGap is the least time between two wakes a Waker sends: the most a
// committed event waits for its relay beyond the wake's own round trip.
// Short, because a wake asked for within the gap waits for its end, and a
// saga step's reply waits for its wake: with 10 ms, a step at one client
// waited 4 to 5 ms for its reply to be produced, with 2 ms 0.6 ms, and
// HTTP creates cost the same CPU either way (docs/benchmarks.md, saga
// section). At most 500 notifications a second, each a transaction of a
// few microseconds.
const WakeGap = 2 * time.Millisecond

// Waker tells the relays that outbox rows were committed. Writers call Wake
// after their commit; Run sends one notification (NOTIFY outbox_event) for
// every burst of Wake calls, at most one per WakeGap.
//
// The notification is not sent inside the writing transaction (as a
// trigger on outbox_event would send it): PostgreSQL serializes the commits
// of all transactions that notify, through their WAL flush, on one lock, so
// every charge's phase 3 would wait in line for the one before it: one WAL
// flush per commit where group commit shares one among many, and a third
// of the throughput (docs/benchmarks.md, "CPU per charge beside the
// peers"). Sent after the commit, from one goroutine per replica, the
// notification is one small transaction per burst, and the charges'
// commits do not wait for each other.
//
// A wake is only a hint: a lost one (a crash after the commit, a failed
// notify) costs the relay's poll interval, never an event.
type Waker struct {
	notify func(context.Context) error
	logger *slog.Logger
	kick   chan struct{}
}

// NewWaker returns a Waker that sends its wakes with notify.
func NewWaker(notify func(context.Context) error, logger *slog.Logger) *Waker {
	return &Waker{notify: notify, logger: logger, kick: make(chan struct{}, 1)}
}

// Wake asks for a notification soon. It never blocks: a wake asked for
// while one is pending joins it. A nil Waker does nothing.
func (w *Waker) Wake() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run sends the wakes until ctx ends, and returns nil then.
func (w *Waker) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		}
		if err := w.notify(ctx); err != nil && ctx.Err() == nil {
			// Debug, not warn: during a database outage every burst
			// fails, and the relay's poll makes up for each.
			w.logger.DebugContext(ctx, "outbox waker: notify failed; the relay's poll will find the rows", "err", err)
		}
		if !backoff.Sleep(ctx, WakeGap) {
			return nil
		}
	}
}

// Metrics are the relay's Prometheus series. A nil *Metrics records nothing.
type Metrics struct {
	publishedTotal *prometheus.CounterVec
	lag            prometheus.Gauge
	leader         prometheus.Gauge
	delay          prometheus.Histogram
}

// NewMetrics registers the relay's series on reg. topic is the configured
// PAYMENT_EVENTS_TOPIC: the label of the lag and leader gauges (which are
// about the whole outbox), and the first series of the published counter,
// which counts per topic the rows were addressed to.
//
// Alert on max(outbox_relay_lag_seconds) growing, and on
// sum(outbox_relay_leader) == 0 for longer than a restart: the lag is
// measured by the leader only, so without one it reads 0.
func NewMetrics(reg prometheus.Registerer, topic string) *Metrics {
	labels := prometheus.Labels{"topic": topic}
	m := &Metrics{
		publishedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_events_published_total",
			Help: "Outbox events published to Kafka and acknowledged, by the topic stored in the row (a republished event counts again).",
		}, []string{"topic"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "outbox_relay_lag_seconds",
			Help:        "Age of the oldest unpublished outbox event at the leader's last read; 0 when none is pending.",
			ConstLabels: labels,
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "outbox_relay_leader",
			Help:        "1 while this replica's relay holds the leadership, else 0.",
			ConstLabels: labels,
		}),
	}
	m.delay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "outbox_event_publish_delay_seconds",
		Help: "Time from an outbox row's created_at (the start of the transaction that recorded the outcome) to the broker's acknowledgement of its event; a republished event is observed again.",
		// From a NOTIFY wake-up (milliseconds) to a missed one waiting for
		// the safety-net poll (OUTBOX_POLL_INTERVAL, 5 s) and beyond.
		Buckets:     []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		ConstLabels: labels,
	})
	m.publishedTotal.WithLabelValues(topic) // export zero, so alerts see the series
	reg.MustRegister(m.publishedTotal, m.lag, m.leader, m.delay)
	return m
}

// publishDelay observes, for each event of a batch read readAgo before its
// acknowledgement, how long it waited from its row's creation.
func (m *Metrics) publishDelay(events []Event, readAgo time.Duration) {
	if m == nil {
		return
	}
	for _, e := range events {
		m.delay.Observe((e.Age + readAgo).Seconds())
	}
}

func (m *Metrics) published(topic string, n int) {
	if m != nil {
		m.publishedTotal.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) setLag(d time.Duration) {
	if m != nil {
		m.lag.Set(d.Seconds())
	}
}

func (m *Metrics) setLeader(on bool) {
	if m == nil {
		return
	}
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
		m.lag.Set(0)
	}
}
