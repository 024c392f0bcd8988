package consumer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/testdb"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// R-DIST-IDEM-2: the same event delivered five times is applied once; the
// other four are counted as duplicates and change nothing.
func TestSameEventFiveTimesAppliesOnce(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	r := start(t, testConfig(brokers, topic, dlt), dsn, nil)

	e := newEvent(1001, "100.50", t0)
	msg := e.message()
	publish(t, brokers, topic, msg, msg) // two in one produce
	eventually(t, 30*time.Second, "the first two deliveries", func() bool { return r.applied(t)+r.duplicates(t) == 2 })
	publish(t, brokers, topic, msg)
	publish(t, brokers, topic, msg, msg)
	eventually(t, 30*time.Second, "all five deliveries", func() bool { return r.applied(t)+r.duplicates(t) == 5 })

	if a, d := r.applied(t), r.duplicates(t); a != 1 || d != 4 {
		t.Errorf("applied %d, duplicates %d; want 1 and 4", a, d)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_event WHERE event_id = $1`, e.EventID); n != 1 {
		t.Errorf("processed_event rows for the event = %d, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM order_projection`); n != 1 {
		t.Errorf("order_projection rows = %d, want 1", n)
	}
	if got := amountOf(t, pool, 1001); got != "100.5000" {
		t.Errorf("amount %s, want 100.5000", got)
	}
}

// A reader that dies after its batch's transaction committed and before the
// offset commit leaves those offsets uncommitted. A new reader in the same
// group gets the events again and skips every one of them.
func TestRedeliveryAfterCrashBeforeOffsetCommitIsSkipped(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	cfg := testConfig(brokers, topic, dlt)

	const n = 50
	var evs []event
	for i := range n {
		evs = append(evs, newEvent(int64(1001+i), strconv.Itoa(10+i), t0))
	}
	publish(t, brokers, topic, events(evs...)...)

	// The first reader's network dies in the window between the database
	// commit and the offset commit: for the broker it is a killed process
	// (connections gone, no heartbeat, no leave request), so its offset
	// commit never arrives.
	dead := &killableDialer{}
	killed := make(chan struct{})
	var once atomic.Bool
	cfgA := cfg
	cfgA.Dialer = kafkaDialer(dead)
	cfgA.BatchSize = 10 // so the second reader has both old and new events
	a := start(t, cfgA, dsn, func(c *Consumer) {
		c.afterApply = func() {
			if once.CompareAndSwap(false, true) {
				dead.kill()
				close(killed)
			}
		}
	})
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatal("the first reader never applied a batch")
	}
	a.stop()
	applied := a.applied(t)
	if applied == 0 || applied == n || count(t, pool, `SELECT count(*) FROM processed_event`) != applied {
		t.Fatalf("first reader applied %d events, processed_event has %d", applied, count(t, pool, `SELECT count(*) FROM processed_event`))
	}
	if off := committedOffset(t, brokers, cfg.GroupID, topic, 0); off > 0 {
		t.Fatalf("offset %d committed by the killed reader", off)
	}

	b := start(t, cfg, dsn, nil)
	eventually(t, 60*time.Second, "the second reader to catch up", func() bool { return b.applied(t)+b.duplicates(t) >= n })

	if d := b.duplicates(t); d != applied {
		t.Errorf("second reader skipped %d duplicates, want %d (what the killed reader applied)", d, applied)
	}
	if got := b.applied(t); got != n-applied {
		t.Errorf("second reader applied %d, want %d", got, n-applied)
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event`); got != n {
		t.Errorf("processed_event rows = %d, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != n {
		t.Errorf("order_projection rows = %d, want %d", got, n)
	}
	eventually(t, 30*time.Second, "the second reader's offset commit", func() bool {
		return committedOffset(t, brokers, cfg.GroupID, topic, 0) == n
	})
}

// Rebuilding the projection under a new consumer group: the read model is
// emptied and a new group reads the topic from the start. processed_event
// is per consumer, so the new group applies every event the old group had
// applied (none is skipped as "already processed"), and both groups still
// apply each event once.
func TestRebuildUnderANewGroupAppliesEveryEvent(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 3), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)

	const n = 40
	var evs []event
	for i := range n {
		evs = append(evs, newEvent(int64(1001+i), strconv.Itoa(10+i), t0))
	}
	publish(t, brokers, topic, events(evs...)...)
	old := start(t, testConfig(brokers, topic, dlt), dsn, nil)
	eventually(t, 30*time.Second, "the old group to apply everything", func() bool { return old.applied(t) == n })
	old.stop()

	if _, err := pool.Exec(context.Background(), `TRUNCATE order_projection`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, topic, dlt) // a new group id
	rebuilt := start(t, cfg, dsn, nil)
	eventually(t, 30*time.Second, "the new group to get through the topic", func() bool {
		return rebuilt.applied(t)+rebuilt.duplicates(t) == n
	})
	if got := rebuilt.applied(t); got != n {
		t.Errorf("the new group applied %d events, want %d (skipped %d as processed)", got, n, rebuilt.duplicates(t))
	}
	if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != n {
		t.Errorf("order_projection rows after the rebuild = %d, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event WHERE consumer_name = $1`, cfg.GroupID); got != n {
		t.Errorf("processed_event rows of the new group = %d, want %d", got, n)
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event`); got != 2*n {
		t.Errorf("processed_event rows = %d, want %d (each group its own)", got, 2*n)
	}
}

// Events of one order delivered in any order, in one batch or across
// batches: the projection ends with the newest, and every older event
// counts as superseded.
func TestOutOfOrderEventsKeepTheNewest(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	tests := []struct {
		name     string
		order    []int // indexes of e0 (oldest), e1, e2 (newest) in delivery order
		oneByOne bool  // wait for each to be applied before sending the next
	}{
		{"newest first, one batch", []int{2, 0, 1}, false},
		{"newest first, one by one", []int{2, 0, 1}, true},
		{"newest in the middle, one by one", []int{0, 2, 1}, true},
		{"in order, one by one", []int{0, 1, 2}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
			dsn := testdb.New(t)
			pool := openPool(t, dsn)
			r := start(t, testConfig(brokers, topic, dlt), dsn, nil)
			all := []event{
				newEvent(1001, "1.00", t0),
				newEvent(1001, "2.00", t0.Add(time.Second)),
				newEvent(1001, "3.00", t0.Add(2*time.Second)),
			}
			var send []event
			for i, idx := range tc.order {
				send = append(send, all[idx])
				if tc.oneByOne {
					publish(t, brokers, topic, all[idx].message())
					eventually(t, 30*time.Second, "event applied", func() bool { return r.applied(t) == i+1 })
				}
			}
			if !tc.oneByOne {
				publish(t, brokers, topic, events(send...)...)
			}
			eventually(t, 30*time.Second, "all applied", func() bool { return r.applied(t) == 3 })
			if got := amountOf(t, pool, 1001); got != "3.0000" {
				t.Errorf("amount %s, want the newest event's 3.0000", got)
			}
			var lastEvent string
			if err := pool.QueryRow(context.Background(), `SELECT last_event_id::text FROM order_projection WHERE order_id = 1001`).Scan(&lastEvent); err != nil {
				t.Fatal(err)
			}
			if lastEvent != all[2].EventID {
				t.Errorf("last_event_id %s, want %s", lastEvent, all[2].EventID)
			}
			if got := count(t, pool, `SELECT count(*) FROM processed_event`); got != 3 {
				t.Errorf("processed_event rows = %d, want 3", got)
			}
			// An event is superseded when a newer one was delivered before
			// it (events are indexed oldest first). In one batch, the older
			// ones all lose to the newest.
			wantSuperseded, newest := 0, -1
			for _, idx := range tc.order {
				if idx < newest {
					wantSuperseded++
				}
				newest = max(newest, idx)
			}
			if !tc.oneByOne {
				wantSuperseded = len(tc.order) - 1
			}
			if got := r.superseded(t); got != wantSuperseded {
				t.Errorf("superseded %d, want %d", got, wantSuperseded)
			}
		})
	}
}

// Two readers in one group split a 3-partition topic; every event is
// applied exactly once across them, including across the rebalances their
// joining causes.
func TestTwoReadersSplitPartitionsAndApplyEachEventOnce(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 3), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	cfg := testConfig(brokers, topic, dlt)
	a := start(t, cfg, dsn, nil)
	b := start(t, cfg, dsn, nil)

	// Publish in rounds until both readers have applied something, so the
	// test proves a split rather than one reader doing all the work.
	sent := 0
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; ; round++ {
		var evs []event
		for i := range 30 {
			evs = append(evs, newEvent(int64(1+sent+i), "10.00", t0))
		}
		publish(t, brokers, topic, events(evs...)...)
		sent += len(evs)
		eventually(t, 60*time.Second, "the round to be applied", func() bool { return a.applied(t)+b.applied(t) == sent })
		if a.applied(t) > 0 && b.applied(t) > 0 && round >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d events one reader applied none: a=%d b=%d", sent, a.applied(t), b.applied(t))
		}
	}

	if got := a.applied(t) + b.applied(t); got != sent {
		t.Errorf("applied %d (a=%d, b=%d), want %d: each exactly once", got, a.applied(t), b.applied(t), sent)
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event`); got != sent {
		t.Errorf("processed_event rows = %d, want %d", got, sent)
	}
	if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != sent {
		t.Errorf("order_projection rows = %d, want %d", got, sent)
	}
}

// Records that can never be applied go to the dead-letter topic with headers
// naming the error and where they came from; the records after them are
// applied, and the offset moves past them all.
func TestPoisonMessagesGoToTheDeadLetterTopic(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	cfg := testConfig(brokers, topic, dlt)
	r := start(t, cfg, dsn, nil)

	good1, good2 := newEvent(1001, "100.50", t0), newEvent(1002, `"7.25"`, t0)
	withType := func(typ string) []byte {
		e := newEvent(1003, "1", t0)
		e.EventType = typ
		return e.message().Value
	}
	withAmount := func(amount string) []byte { return newEvent(1004, amount, t0).message().Value }
	poisons := []struct {
		value  []byte
		reason string
	}{
		{[]byte(`{"eventId": "0193a3c8-`), ReasonInvalidJSON},
		{[]byte(`[1, 2, 3]`), ReasonInvalidJSON},
		{[]byte(`{"eventType":"OrderCreated.v1","orderId":1005,"customerId":42,"amount":1,"occurredAt":"2026-11-29T10:00:00Z"}`), ReasonInvalidEventID},
		{[]byte(`{"eventId":"not-a-uuid","eventType":"OrderCreated.v1","orderId":1005,"customerId":42,"amount":1,"occurredAt":"2026-11-29T10:00:00Z"}`), ReasonInvalidEventID},
		{withType("OrderCancelled.v1"), ReasonUnknownEventType},
		{withAmount(`"abc"`), ReasonInvalidAmount},
		{withAmount(`-5`), ReasonInvalidAmount},
		{withAmount(`1.23456`), ReasonInvalidAmount},
		{[]byte(`{"eventId":"0193a3c8-7a4e-7cc1-8a1e-3f0e2b6c9d09","eventType":"OrderCreated.v1","orderId":1006,"orderId":1001,"customerId":42,"amount":"1","occurredAt":"2026-11-29T10:00:00Z"}`), ReasonDuplicateKey},
	}
	msgs := []idempotent.Message{good1.message()}
	for _, p := range poisons {
		msgs = append(msgs, idempotent.Message{Key: []byte("k"), Value: p.value,
			Headers: []idempotent.Header{{Key: "traceparent", Value: []byte("00-abc-def-01")}}})
	}
	msgs = append(msgs, good2.message())
	publish(t, brokers, topic, msgs...)

	total := len(msgs)
	eventually(t, 30*time.Second, "the partition to be consumed to the end", func() bool {
		return committedOffset(t, brokers, cfg.GroupID, topic, 0) == int64(total)
	})

	if got := r.applied(t); got != 2 {
		t.Errorf("applied %d, want the 2 good events", got)
	}
	if got := amountOf(t, pool, 1002); got != "7.2500" {
		t.Errorf("the event after the poison: amount %s, want 7.2500", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event`); got != 2 {
		t.Errorf("processed_event rows = %d, want 2 (poison is not recorded)", got)
	}
	recs := kafkatest.ReadAll(t, brokers, dlt, 30*time.Second)
	asyncapitest.ValidateRecords(t, "order.events.DLT", recs)
	if len(recs) != len(poisons) {
		t.Fatalf("dead-letter topic holds %d records, want %d", len(recs), len(poisons))
	}
	wantReasons := map[string]int{}
	for i, rec := range recs {
		h := map[string]string{}
		for _, hd := range rec.Headers {
			h[hd.Key] = string(hd.Value)
		}
		p := poisons[i]
		if string(rec.Value) != string(p.value) {
			t.Errorf("DLT record %d: value %q, want the original %q", i, rec.Value, p.value)
		}
		want := map[string]string{
			HeaderErrorCode:         p.reason,
			HeaderOriginalTopic:     topic,
			HeaderOriginalPartition: "0",
			HeaderOriginalOffset:    strconv.Itoa(i + 1),
			HeaderConsumerGroup:     cfg.GroupID,
			"traceparent":           "00-abc-def-01",
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("DLT record %d: header %s = %q, want %q", i, k, h[k], v)
			}
		}
		if h[HeaderErrorMessage] == "" {
			t.Errorf("DLT record %d: no %s header", i, HeaderErrorMessage)
		}
		if p.reason == ReasonDuplicateKey && !strings.Contains(h[HeaderErrorMessage], "orderId") {
			t.Errorf("DLT record %d: %s = %q does not name the repeated field", i, HeaderErrorMessage, h[HeaderErrorMessage])
		}
		wantReasons[p.reason]++
	}
	for reason, n := range wantReasons {
		if got := r.deadLettered(t, reason); got != n {
			t.Errorf("dead-lettered{reason=%s} = %d, want %d", reason, got, n)
		}
	}
}

// The dead-letter producer's failures, injected by the broker: a fenced
// producer is replaced (it would refuse every later record), a record the
// dead-letter topic refuses once is sent again, and a record it refuses for
// good is given up after MaxAttempts attempts, counted in
// order_events_dead_letter_refused_total, so the partition flows on. Each
// case sends a good event, a poison record and a good event.
func TestDeadLetterProducerFailures(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)
	tests := []struct {
		name     string
		err      *kerr.Error
		count    int // produce requests to the DLT answered with err; -1: all
		inDLT    int // poison records the DLT holds afterwards
		refused  int // order_events_dead_letter_refused_total
		wantHits int // produce requests the fault answered; 0: do not check
		attempts int
	}{
		{name: "fenced once, then a new producer", err: kerr.ProducerFenced, count: 1, inDLT: 1, wantHits: 1, attempts: 3},
		{name: "refused once", err: kerr.MessageTooLarge, count: 1, inDLT: 1, wantHits: 1, attempts: 3},
		{name: "too large for good", err: kerr.MessageTooLarge, count: -1, refused: 1, wantHits: 3, attempts: 3},
		{name: "not authorized for good", err: kerr.TopicAuthorizationFailed, count: -1, refused: 1, wantHits: 2, attempts: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
			dsn := testdb.New(t)
			pool := openPool(t, dsn)
			fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlt, Err: tc.err, Count: tc.count})
			cfg := testConfig(brokers, topic, dlt)
			cfg.MaxAttempts = tc.attempts
			r := start(t, cfg, dsn, nil)

			poisonValue := []byte(`{"eventId":"not-a-uuid","eventType":"OrderCreated.v1"}`)
			publish(t, brokers, topic, newEvent(1001, `"1.00"`, t0).message(),
				idempotent.Message{Key: []byte("k"), Value: poisonValue}, newEvent(1002, `"2.00"`, t0).message())
			eventually(t, 30*time.Second, "the partition to be consumed to the end", func() bool {
				return committedOffset(t, brokers, cfg.GroupID, topic, 0) == 3
			})
			fault.Remove()

			if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != 2 {
				t.Errorf("order_projection rows = %d, want the 2 good events", got)
			}
			dead := kafkatest.ReadAll(t, brokers, dlt, 30*time.Second)
			asyncapitest.ValidateRecords(t, "order.events.DLT", dead)
			if got := len(dead); got != tc.inDLT {
				t.Errorf("dead-letter topic holds %d records, want %d", got, tc.inDLT)
			}
			if got := counter(t, r.c.metrics.deadLetterRefused); got != tc.refused {
				t.Errorf("order_events_dead_letter_refused_total = %d, want %d", got, tc.refused)
			}
			if got := r.deadLettered(t, ReasonInvalidEventID); got != tc.inDLT {
				t.Errorf("dead-lettered{reason=%s} = %d, want %d", ReasonInvalidEventID, got, tc.inDLT)
			}
			if tc.wantHits > 0 && fault.Hits() != tc.wantHits {
				t.Errorf("produce requests refused = %d, want %d", fault.Hits(), tc.wantHits)
			}
			if err := r.c.Health(); err != nil {
				t.Errorf("Health = %v after the partition moved on", err)
			}
		})
	}
}

// An event the database rejects for good (here a CHECK constraint stands in
// for any rule the data breaks: SQLSTATE classes 22 and 23) does not stall
// its partition: the failing batch is applied event by event, the others
// apply, and the rejected one goes to the dead-letter topic after
// MaxAttempts attempts of its own, with the database's error and its origin
// in the headers. The partition then flows on.
func TestEventTheDatabaseRejectsGoesToTheDeadLetterTopic(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	if _, err := pool.Exec(context.Background(), `ALTER TABLE order_projection
		ADD CONSTRAINT test_rejects_order_666 CHECK (order_id <> 666)`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, topic, dlt)
	cfg.MaxAttempts = 3
	r := start(t, cfg, dsn, nil)

	before, bad, after := newEvent(1001, `"1.00"`, t0), newEvent(666, `"6.66"`, t0), newEvent(1002, `"2.00"`, t0)
	publish(t, brokers, topic, before.message(), bad.message(), after.message())
	eventually(t, 30*time.Second, "the partition to be consumed to the end", func() bool {
		return committedOffset(t, brokers, cfg.GroupID, topic, 0) == 3
	})
	later := newEvent(1003, `"3.00"`, t0)
	publish(t, brokers, topic, later.message())
	eventually(t, 30*time.Second, "the next event", func() bool { return committedOffset(t, brokers, cfg.GroupID, topic, 0) == 4 })

	if got := count(t, pool, `SELECT count(*) FROM order_projection WHERE order_id IN (1001, 1002, 1003)`); got != 3 {
		t.Errorf("applied orders = %d, want 3", got)
	}
	if got := count(t, pool, `SELECT count(*) FROM order_projection WHERE order_id = 666`); got != 0 {
		t.Errorf("the rejected order is in the projection")
	}
	if got := count(t, pool, `SELECT count(*) FROM processed_event WHERE event_id = $1`, bad.EventID); got != 0 {
		t.Errorf("the rejected event is recorded as processed")
	}
	recs := kafkatest.ReadAll(t, brokers, dlt, 30*time.Second)
	asyncapitest.ValidateRecords(t, "order.events.DLT", recs)
	if len(recs) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want 1", len(recs))
	}
	h := map[string]string{}
	for _, hd := range recs[0].Headers {
		h[hd.Key] = string(hd.Value)
	}
	if string(recs[0].Value) != string(bad.message().Value) || h[HeaderErrorCode] != ReasonRejected ||
		!strings.Contains(h[HeaderErrorMessage], "test_rejects_order_666") ||
		h[HeaderOriginalOffset] != "1" || h[HeaderOriginalTopic] != topic {
		t.Errorf("DLT record %s with headers %v", recs[0].Value, h)
	}
	if got := r.deadLettered(t, ReasonRejected); got != 1 {
		t.Errorf("dead-lettered{reason=%s} = %d, want 1", ReasonRejected, got)
	}
	if got := counter(t, r.c.metrics.retries.WithLabelValues(stepApplyAlone)); got != cfg.MaxAttempts-1 {
		t.Errorf("retries of the rejected event alone = %d, want %d (MaxAttempts - 1)", got, cfg.MaxAttempts-1)
	}
}

// A failure that is not about one event (the table is gone: a deploy or
// migration gone wrong) is retried without limit and never dead-letters
// anything: every event would be "bad". Nothing is committed meanwhile, and
// once the table is back every event applies once.
func TestSystemicFailureIsRetriedWithoutLimitAndNothingIsDeadLettered(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	cfg := testConfig(brokers, topic, dlt)
	cfg.MaxAttempts = 2
	r := start(t, cfg, dsn, nil)
	ctx := context.Background()

	if _, err := pool.Exec(ctx, `ALTER TABLE processed_event RENAME TO processed_event_away`); err != nil {
		t.Fatal(err)
	}
	publish(t, brokers, topic, newEvent(1001, `"1.00"`, t0).message(), newEvent(1002, `"2.00"`, t0).message())
	eventually(t, 30*time.Second, "many more failed attempts than MaxAttempts", func() bool {
		return counter(t, r.c.metrics.retries.WithLabelValues(stepApply)) >= 5*cfg.MaxAttempts
	})
	if off := committedOffset(t, brokers, cfg.GroupID, topic, 0); off > 0 {
		t.Fatalf("offset %d committed while nothing could be applied", off)
	}
	if err := r.c.Health(); err == nil {
		t.Error("Health is nil while every attempt fails")
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE processed_event_away RENAME TO processed_event`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "both events", func() bool { return committedOffset(t, brokers, cfg.GroupID, topic, 0) == 2 })
	if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != 2 {
		t.Errorf("order_projection rows = %d, want 2", got)
	}
	if recs := kafkatest.ReadAll(t, brokers, dlt, 30*time.Second); len(recs) != 0 {
		t.Errorf("dead-letter topic holds %d records, want none", len(recs))
	}
}

// A database outage mid-stream: batches fail and are retried with backoff,
// no offset moves past an unapplied event, readiness reports the failure,
// and once the database is back every event is applied exactly once.
func TestDatabaseOutageLosesNothingAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 3), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	proxy := newPGProxy(t, dsn)
	cfg := testConfig(brokers, topic, dlt)
	r := start(t, cfg, proxy.proxied, nil)

	sent := 0
	send := func(n int) {
		var evs []event
		for i := range n {
			evs = append(evs, newEvent(int64(1+sent+i), "10.00", t0))
		}
		publish(t, brokers, topic, events(evs...)...)
		sent += n
	}
	send(100)
	eventually(t, 30*time.Second, "the first events", func() bool { return r.applied(t) == 100 })

	// Events keep arriving while the database is away, and the outage
	// starts while the consumer is busy.
	stopSending := make(chan struct{})
	sending := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stopSending:
				sending <- n
				return
			default:
			}
			var evs []event
			for i := range 20 {
				evs = append(evs, newEvent(int64(100000+n+i), "20.00", t0))
			}
			p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err = p.Publish(ctx, events(evs...)...)
				cancel()
				p.Close()
			}
			if err != nil {
				t.Errorf("publish: %v", err)
				sending <- n
				return
			}
			n += len(evs)
		}
	}()
	eventually(t, 30*time.Second, "events in flight", func() bool { return r.applied(t) > 100 })
	proxy.setDown(true)
	eventually(t, 30*time.Second, "readiness to report the outage", func() bool {
		err := r.c.Health()
		return err != nil && !errors.Is(err, errNotRunning)
	})
	appliedDuringOutage := r.applied(t)
	time.Sleep(300 * time.Millisecond) // several retries fail meanwhile
	proxy.setDown(false)
	close(stopSending)
	sent += <-sending
	send(10) // and some after

	eventually(t, 60*time.Second, "every event", func() bool {
		return count(t, pool, `SELECT count(*) FROM processed_event`) == sent
	})
	eventually(t, 30*time.Second, "the consumer to be healthy", func() bool { return r.c.Health() == nil })

	if got := count(t, pool, `SELECT count(*) FROM order_projection`); got != sent {
		t.Errorf("order_projection rows = %d, want %d", got, sent)
	}
	// A commit whose answer the outage swallowed is retried and then seen
	// as duplicates, so applied can fall short of sent; it can never
	// exceed it, and together they account for every event.
	applied, dups := r.applied(t), r.duplicates(t)
	if applied > sent || applied+dups < sent {
		t.Errorf("applied %d, duplicates %d, sent %d", applied, dups, sent)
	}
	if got := counter(t, r.c.metrics.retries.WithLabelValues("applying order events")); got == 0 {
		t.Error("no retry was counted during the outage")
	}
	t.Logf("sent %d, applied %d before the outage, %d in all, %d duplicates", sent, appliedDuringOutage, applied, dups)
}

// An event dated far in the future would win over every real event of its
// order (the projection keeps the newest by occurredAt) and freeze the
// order until that date. It goes to the dead-letter topic instead, and the
// order's real events apply.
func TestFutureDatedEventDoesNotFreezeTheOrder(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic, dlt := kafkatest.CreateTopic(t, brokers, 1), kafkatest.CreateTopic(t, brokers, 1)
	dsn := testdb.New(t)
	pool := openPool(t, dsn)
	cfg := testConfig(brokers, topic, dlt)
	cfg.MaxClockSkew = time.Minute
	r := start(t, cfg, dsn, nil)

	future := newEvent(1001, `"999.00"`, time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC))
	aheadOfSkew := newEvent(1001, `"888.00"`, time.Now().Add(time.Hour))
	real := newEvent(1001, `"100.50"`, time.Now().Add(-time.Minute))
	publish(t, brokers, topic, future.message(), aheadOfSkew.message(), real.message())
	eventually(t, 30*time.Second, "the partition to be consumed to the end", func() bool {
		return committedOffset(t, brokers, cfg.GroupID, topic, 0) == 3
	})

	if got := amountOf(t, pool, 1001); got != "100.5000" {
		t.Errorf("order 1001 amount %s, want the real event's 100.5000", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM order_projection WHERE last_event_at > now() + interval '1 minute'`); n != 0 {
		t.Errorf("%d projection rows dated in the future", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM processed_event`); n != 1 {
		t.Errorf("processed_event rows = %d, want 1 (only the real event)", n)
	}
	recs := kafkatest.ReadAll(t, brokers, dlt, 30*time.Second)
	asyncapitest.ValidateRecords(t, "order.events.DLT", recs)
	if len(recs) != 2 {
		t.Fatalf("dead-letter topic holds %d records, want the 2 future-dated ones", len(recs))
	}
	for i, rec := range recs {
		for _, h := range rec.Headers {
			if h.Key == HeaderErrorCode && string(h.Value) != ReasonInvalidTime {
				t.Errorf("DLT record %d: %s = %s, want %s", i, HeaderErrorCode, h.Value, ReasonInvalidTime)
			}
		}
	}
	if got := r.deadLettered(t, ReasonInvalidTime); got != 2 {
		t.Errorf("dead-lettered{reason=%s} = %d, want 2", ReasonInvalidTime, got)
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	d := decoder{defaultCurrency: "EUR", maxSkew: 5 * time.Minute, now: func() time.Time { return now }}
	const id = "0193a3c8-7a4e-7cc1-8a1e-3f0e2b6c9d01"
	at := func(occurred string) []byte {
		return []byte(`{"eventId":"` + id + `","eventType":"OrderCreated.v1","orderId":1,"customerId":42,"amount":1,"occurredAt":"` + occurred + `"}`)
	}
	body := func(fields string) []byte {
		return []byte(`{"eventId":"` + id + `","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,"occurredAt":"2026-11-29T10:00:00.1234567Z"` + fields + `}`)
	}
	tests := []struct {
		name     string
		value    []byte
		amount   string // want, when valid
		currency string
		reason   string // want, when poison
		// clockOnly: poison by the consumer's clock alone, which the
		// contract (api/asyncapi.yaml) cannot see; every other poison
		// breaks the contract too, and every valid event keeps it.
		clockOnly bool
	}{
		{name: "number amount", value: body(`,"amount":100.50,"currency":"RUB"`), amount: "100.5", currency: "RUB"},
		{name: "string amount", value: body(`,"amount":"100.50","currency":"RUB"`), amount: "100.5", currency: "RUB"},
		{name: "no float rounding", value: body(`,"amount":123456789012345.1234`), amount: "123456789012345.1234", currency: "EUR"},
		{name: "exponent (BigDecimal.toString)", value: body(`,"amount":1E+3`), amount: "1000", currency: "EUR"},
		{name: "no currency: default", value: body(`,"amount":1`), amount: "1", currency: "EUR"},
		{name: "unknown fields ignored", value: body(`,"amount":1,"channel":"web"`), amount: "1", currency: "EUR"},
		// Names match exactly, as a case-sensitive reader in front of us
		// matches them: "OrderId" is some other, unknown field.
		{name: "a name in other case is another field", value: body(`,"amount":1,"OrderId":7,"AMOUNT":"9"`), amount: "1", currency: "EUR"},
		{name: "a name repeated", value: body(`,"amount":1,"amount":"2"`), reason: ReasonDuplicateKey},
		{name: "a name repeated in a nested object", value: body(`,"amount":1,"meta":{"a":1,"a":1}`), reason: ReasonDuplicateKey},
		{name: "not JSON", value: []byte(`nope`), reason: ReasonInvalidJSON},
		{name: "empty object", value: []byte(`{}`), reason: ReasonInvalidJSON},
		{name: "nil event id", value: []byte(`{"eventId":"00000000-0000-0000-0000-000000000000","eventType":"OrderCreated.v1"}`), reason: ReasonInvalidEventID},
		{name: "event id a number", value: []byte(`{"eventId":7,"eventType":"OrderCreated.v1"}`), reason: ReasonInvalidEventID},
		{name: "no event type", value: []byte(`{"eventId":"` + id + `"}`), reason: ReasonUnknownEventType},
		{name: "amount missing", value: body(``), reason: ReasonInvalidAmount},
		{name: "amount zero", value: body(`,"amount":0`), reason: ReasonInvalidAmount},
		{name: "amount with spaces", value: body(`,"amount":" 1"`), reason: ReasonInvalidAmount},
		{name: "amount too many digits", value: body(`,"amount":"1234567890123456"`), reason: ReasonInvalidAmount},
		{name: "amount an object", value: body(`,"amount":{"v":1}`), reason: ReasonInvalidAmount},
		{name: "bad currency", value: body(`,"amount":1,"currency":"rub"`), reason: ReasonInvalidField},
		{name: "bad saga id", value: body(`,"amount":1,"sagaId":"x"`), reason: ReasonInvalidField},
		{name: "order id a string", value: []byte(`{"eventId":"` + id + `","eventType":"OrderCreated.v1","orderId":"1","customerId":42,"amount":1,"occurredAt":"2026-11-29T10:00:00Z"}`), reason: ReasonInvalidField},
		{name: "occurredAt in 2999", value: at("2999-01-01T00:00:00Z"), reason: ReasonInvalidTime, clockOnly: true},
		{name: "occurredAt past the allowed skew", value: at("2026-11-29T10:05:00.000001Z"), reason: ReasonInvalidTime, clockOnly: true},
		{name: "occurredAt the zero time", value: at("0001-01-01T00:00:00Z"), reason: ReasonInvalidTime},
		{name: "occurredAt the Unix epoch", value: at("1970-01-01T00:00:00Z"), reason: ReasonInvalidTime},
		{name: "no occurredAt", value: []byte(`{"eventId":"` + id + `","eventType":"OrderCreated.v1","orderId":1,"customerId":42,"amount":1}`), reason: ReasonInvalidField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := d.decode(tc.value)
			switch contractErr := asyncapitest.Check("order.events", []byte("1001"), nil, tc.value); {
			case tc.reason == "" && contractErr != nil:
				t.Errorf("the consumer takes the event, the contract refuses it: %v", contractErr)
			case tc.reason != "" && !tc.clockOnly && contractErr == nil:
				t.Errorf("poison (%s) that the contract takes as valid", tc.reason)
			}
			var pe *PoisonError
			if tc.reason != "" {
				if !errors.As(err, &pe) || pe.Reason != tc.reason {
					t.Fatalf("err = %v, want poison %s", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Order.Total.Amount().String() != tc.amount || string(e.Order.Total.Currency()) != tc.currency {
				t.Errorf("money = %s %s, want %s %s", e.Order.Total.Amount(), e.Order.Total.Currency(), tc.amount, tc.currency)
			}
			if want := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC); !e.OccurredAt.Equal(want) {
				t.Errorf("occurredAt %s, want %s (microseconds)", e.OccurredAt, want)
			}
			if e.EventID.String() != id || e.Order.ID != 1001 || e.Order.CustomerID != 42 {
				t.Errorf("event %+v", e)
			}
		})
	}
}
