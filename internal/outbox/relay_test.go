package outbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/outbox"
)

// The relay publishes every row once, in id order per key, with the
// eventId and eventType headers, and marks each row published.
func TestRelayPublishesEveryRowOnceInOrderPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	const n = 120
	e.writeEvents(t, n/2, 8, 4) // a backlog before the relay starts
	runRelay(t, e.relayConfig())
	e.writeEvents(t, n/2, 8, 4) // and rows committed while it runs
	e.waitAllPublished(t, n)

	recs := kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second)
	checkTopic(t, recs, e.rows(t), once)
}

// Wakes on NOTIFY: with a poll interval far longer than the test's
// deadline, a committed row is published only if the commit woke the relay.
func TestRelayWakesOnCommitNotification(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	cfg := e.relayConfig()
	cfg.PollInterval = 10 * time.Minute
	reg := prometheus.NewRegistry()
	cfg.Metrics = outbox.NewMetrics(reg, e.topic)
	runRelay(t, cfg)
	waitFor(t, "the relay to lead", func() bool { return value(t, reg, "outbox_relay_leader") == 1 })

	for i := range 3 {
		// Each row must be published before the next is written.
		e.writeEvent(t, 1001, int64(i+1))
		e.waitAllPublished(t, i+1)
	}
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), once)
	if got := value(t, reg, "outbox_events_published_total"); got != 3 {
		t.Fatalf("outbox_events_published_total = %v, want 3", got)
	}
	waitFor(t, "no lag once drained", func() bool { return value(t, reg, "outbox_relay_lag_seconds") == 0 })
}

// crashAfterPublish wraps the real store: in the first term, the relay
// "dies" right after the broker acknowledged a batch and before the rows are
// marked: its session (and with it the leadership) ends, as it would with
// the process, and the ids of the batch are reported.
type crashAfterPublish struct {
	outbox.Store
	once    sync.Once
	crashed chan []int64
}

func (s *crashAfterPublish) Lead(ctx context.Context) (outbox.Session, error) {
	sess, err := s.Store.Lead(ctx)
	if err != nil {
		return nil, err
	}
	return &crashingSession{Session: sess, store: s}, nil
}

type crashingSession struct {
	outbox.Session
	store *crashAfterPublish
}

func (c *crashingSession) MarkPublished(ctx context.Context, ids []int64) error {
	crashed := false
	c.store.once.Do(func() {
		_ = c.Session.Close()
		c.store.crashed <- slices.Clone(ids)
		crashed = true
	})
	if crashed {
		return errors.New("killed between publish and mark")
	}
	return c.Session.MarkPublished(ctx, ids)
}

// A relay killed after publishing and before marking: the next relay
// publishes the same rows again with the same eventIds (and the same bytes),
// every other row once, and in the end every row is marked published.
func TestRelayKilledBeforeMarkingRepublishesSameEventIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	const n = 50
	e.writeEvents(t, n, 5, 5)

	first := e.relayConfig()
	crash := &crashAfterPublish{Store: first.Store, crashed: make(chan []int64, 1)}
	first.Store = crash
	first.PollInterval = 10 * time.Minute // once dead, it stays dead
	stopFirst := runRelay(t, first)
	var batch []int64
	select {
	case batch = <-crash.crashed:
	case <-time.After(waitTimeout):
		t.Fatal("the first relay never published a batch")
	}
	stopFirst()
	if got := e.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`); got != 0 {
		t.Fatalf("%d rows marked published by the killed relay, want 0", got)
	}

	runRelay(t, e.relayConfig())
	e.waitAllPublished(t, n)
	republished := map[int64]bool{}
	for _, id := range batch {
		republished[id] = true
	}
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), func(r outboxRow) int {
		if republished[r.ID] {
			return 2
		}
		return 1
	})
}

// Two relays on one database and topic, while writers commit: only one
// leads at a time, so each row is published exactly once and per key in id
// order.
func TestTwoRelaysNeverPublishTheSameRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		cfg := e.relayConfig()
		cfg.Metrics = outbox.NewMetrics(reg, e.topic)
		runRelay(t, cfg)
	}
	leaders := func() float64 {
		return value(t, regs[0], "outbox_relay_leader") + value(t, regs[1], "outbox_relay_leader")
	}
	waitFor(t, "a leader", func() bool { return leaders() == 1 })

	const n = 300
	e.writeEvents(t, n, 12, 6)
	e.waitAllPublished(t, n)
	if got := leaders(); got != 1 {
		t.Fatalf("%v relays lead, want 1", got)
	}
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), once)
}

// When the leader's session dies (here: terminated by the server), the
// standby takes over and publishes what is committed afterwards; the old
// leader steps down without stopping.
func TestStandbyTakesOverWhenLeaderSessionDies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for _, reg := range regs {
		cfg := e.relayConfig()
		cfg.Metrics = outbox.NewMetrics(reg, e.topic)
		// A leader that stepped down rests min(PollInterval, 1s) before it
		// competes again, as with the default 5s; a standby asks every
		// 500 ms, so it is the one that takes over.
		cfg.PollInterval = time.Second
		runRelay(t, cfg)
	}
	leaderOf := func() int {
		for i, reg := range regs {
			if value(t, reg, "outbox_relay_leader") == 1 {
				return i
			}
		}
		return -1
	}
	waitFor(t, "a leader", func() bool { return leaderOf() >= 0 })
	e.writeEvents(t, 10, 1, 1)
	e.waitAllPublished(t, 10)

	old := leaderOf()
	// Terminate the session that holds the relay's advisory lock.
	var terminated bool
	err := e.db.Raw(`SELECT pg_terminate_backend(pid) FROM pg_locks
	                  WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).
		Scan(&terminated).Error
	if err != nil || !terminated {
		t.Fatalf("terminate the leader's session: %v %v", terminated, err)
	}
	waitFor(t, "the standby to lead", func() bool { l := leaderOf(); return l >= 0 && l != old })

	for i := range 10 {
		e.writeEvent(t, 1000, int64(11+i))
	}
	e.waitAllPublished(t, 20)
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), once)
}

// value reads a counter or gauge from reg; 0 if absent.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PRODUCER_FENCED kills a producer for good; the relay replaces it and
// publishes the batch again. The fenced attempt appended nothing, so every
// row is on the topic once.
func TestRelayReplacesFencedProducer(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)
	e := newEnvOn(t, brokers, 1)
	e.writeEvents(t, 20, 2, 2)
	fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.topic, Err: kerr.ProducerFenced, Count: 1})

	cfg := e.relayConfig()
	var created atomic.Int32
	cfg.NewPublisher = func(topic string) (outbox.Publisher, error) {
		created.Add(1)
		return e.newPublisher(topic)
	}
	runRelay(t, cfg)
	e.waitAllPublished(t, 20)
	if fault.Hits() != 1 || created.Load() < 2 {
		t.Fatalf("fault hits = %d, publishers created = %d; want 1 and at least 2", fault.Hits(), created.Load())
	}
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), once)
}

// A publish that fails but leaves the producer usable (here the broker
// refuses the batch five times) keeps the producer: no new producer, no new
// producer id per failure. A relay that builds a new producer, and asks
// the broker for a new producer id, after every failed publish, pausing at
// most a second, leaves thousands of producer ids in a long outage, each
// held in the broker's memory. Every row is still published once.
func TestRelayReusesItsProducerAcrossFailedPublishes(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)
	e := newEnvOn(t, brokers, 1)
	e.writeEvents(t, 20, 2, 2)
	const failures = 5
	refused := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.topic, Err: kerr.PolicyViolation, Count: failures})
	ids := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Observe: true, Count: -1})

	cfg := e.relayConfig()
	cfg.RetryBackoff, cfg.MaxRetryBackoff = 10*time.Millisecond, 50*time.Millisecond
	var created atomic.Int32
	cfg.NewPublisher = func(topic string) (outbox.Publisher, error) {
		created.Add(1)
		return e.newPublisher(topic)
	}
	runRelay(t, cfg)
	e.waitAllPublished(t, 20)

	if refused.Hits() != failures {
		t.Fatalf("refused publishes = %d, want %d", refused.Hits(), failures)
	}
	if got := created.Load(); got != 1 {
		t.Errorf("publishers created = %d, want 1: a producer that is not fenced is reused", got)
	}
	if got := ids.Hits(); got != 1 {
		t.Errorf("InitProducerID requests = %d, want 1", got)
	}
	checkTopic(t, kafkatest.ReadAll(t, e.brokers, e.topic, 30*time.Second), e.rows(t), once)
}

// PAYMENT_EVENTS_TOPIC changed (or a rolling rename: some replicas still
// write to the old topic): rows already written for the old topic are
// published to it, the stored topic, and rows for the new one to the new
// one. A relay that reads only the configured topic's rows leaves the old
// ones unpublished for ever, and retention never deletes them.
func TestRelayPublishesEachRowToItsStoredTopic(t *testing.T) {
	t.Parallel()
	old := newEnv(t, 1)
	old.writeEvents(t, 10, 2, 2) // written while the topic was old.topic
	renamed := old.withTopic(t, kafkatest.CreateTopic(t, old.brokers, 2))
	renamed.writeEvents(t, 10, 2, 2)
	old.writeEvents(t, 4, 2, 2) // a replica not yet rolled still writes the old topic

	runRelay(t, renamed.relayConfig()) // the relay runs with the new topic configured
	renamed.waitAllPublished(t, 24)

	rows := old.rows(t)
	var oldRows, newRows []outboxRow
	for _, r := range rows {
		switch r.Topic {
		case old.topic:
			oldRows = append(oldRows, r)
		case renamed.topic:
			newRows = append(newRows, r)
		default:
			t.Fatalf("row %d for topic %q", r.ID, r.Topic)
		}
	}
	if len(oldRows) != 14 || len(newRows) != 10 {
		t.Fatalf("rows: %d for the old topic, %d for the new, want 14 and 10", len(oldRows), len(newRows))
	}
	checkTopic(t, kafkatest.ReadAll(t, old.brokers, old.topic, 30*time.Second), oldRows, once)
	checkTopic(t, kafkatest.ReadAll(t, old.brokers, renamed.topic, 30*time.Second), newRows, once)
}

// Health reports a leader whose publishes fail, and clears once a batch
// goes through; it is an error before Run and after it.
func TestRelayHealthFollowsPublishing(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)
	e := newEnvOn(t, brokers, 1)
	cfg := e.relayConfig()
	cfg.RetryBackoff, cfg.MaxRetryBackoff = 10*time.Millisecond, 50*time.Millisecond
	r, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Health() == nil {
		t.Fatal("Health is nil before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if r.Health() == nil {
			t.Error("Health is nil after Run returned")
		}
	}()
	waitFor(t, "a healthy relay", func() bool { return r.Health() == nil })

	refused := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.topic, Err: kerr.PolicyViolation, Count: -1})
	e.writeEvent(t, 1001, 1)
	waitFor(t, "Health to report the failing publish", func() bool { return r.Health() != nil })
	if n := e.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NULL`); n != 1 {
		t.Fatalf("unpublished rows = %d, want 1", n)
	}
	refused.Remove()
	e.waitAllPublished(t, 1)
	waitFor(t, "Health to clear", func() bool { return r.Health() == nil })
}
