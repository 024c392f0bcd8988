//go:build fault

package fault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/example/payment-service/internal/kafkatest"
)

// The broker stopped and started twice while the service consumes order
// events and publishes payment events, against real Apache Kafka (it needs
// a broker it can stop: `make test-fault` starts one with
// scripts/kafka-local.sh and names the script in FAULT_KAFKA_SCRIPT). First
// a clean shutdown in the middle of consuming a batch of order events, with
// charges going on meanwhile (their events wait in the outbox, and the
// relay's publishes fail: the broker stays down longer than they wait);
// then a crash (kill -9) while the relay publishes that backlog and the consumers
// read a second batch.
//
// Nothing is lost: every order event is projected and every payment's
// event reaches the topic. Nothing is applied twice: every order event is
// delivered twice with the same eventId, the second copy with another
// amount and a later date, which the projection would take if it applied
// the copy. Every payment has exactly one distinct eventId on the topic.
func TestBrokerOutage(t *testing.T) {
	script := os.Getenv("FAULT_KAFKA_SCRIPT")
	brokers := kafkatest.ExternalBrokers()
	if script == "" || len(brokers) == 0 {
		t.Fatal("TestBrokerOutage needs a real Apache Kafka broker it can stop and start: " +
			"run it with `make test-fault` (KAFKA_BROKERS and FAULT_KAFKA_SCRIPT=scripts/kafka-local.sh)")
	}
	// Small consumer batches, so that an outage lands in the middle of a
	// run of them; one outbox row per publish, so that publishing the
	// backlog lasts long enough (about a second) for the crash to land in it.
	s := newStack(t, stackOptions{replicas: 2, brokers: brokers, env: []string{"KAFKA_CONSUMER_BATCH_SIZE=5", "OUTBOX_BATCH_SIZE=1"}})
	c := newChecker(s)

	batch := func(b, n int) []op {
		var out []op
		for i := range n {
			k := b*1000 + i
			out = append(out, op{key: fmt.Sprintf("broker-%d", k), order: int64(5000 + k), customer: int64(100 + k),
				amount: fmt.Sprintf("%d.10", 50+i), ext: fmt.Sprintf("pi_broker_%d", k)})
		}
		return out
	}
	const (
		charges     = 40  // charged after the outages, from batch 2
		backlog     = 150 // charged while the broker is down: the relay's backlog
		chargers    = 4   // clients charging the backlog at once
		pauseAfter  = 200 // orders of batch 1 projected when the broker goes away
		batch1Size  = 1000
		batch2Size  = 100
		crashWithin = 90 * time.Second
	)

	// Outage 1, clean: the broker goes away while the consumers work
	// through a batch of order events. Charges go on meanwhile (the API
	// needs PostgreSQL only); their events wait in the outbox.
	first := batch(0, batch1Size)
	produceOrders(t, brokers, s.orderTopic, first)
	waitFor(t, 60*time.Second, "the consumers to work through batch 1", func() bool { return s.projected(first) >= pauseAfter })
	kafkaScript(t, script, "pause")
	paused := time.Now()
	atPause := s.projectedOps(first)
	if len(atPause) == len(first) {
		t.Fatal("every order of batch 1 was projected before the broker went away: the outage missed the consumption")
	}
	charged := slices.Clone(atPause[:min(backlog, len(atPause))])
	answers := s.settleAll(charged, chargers, 30*time.Second)
	t.Logf("broker down: %d of %d orders projected, %d charged, %d events waiting in the outbox",
		len(atPause), len(first), len(charged), s.count(`SELECT count(*) FROM outbox_event WHERE published_at IS NULL`))
	// Down for longer than the relay's publish timeout (30 s), so that its
	// publishes fail, rather than wait, and are retried.
	time.Sleep(time.Until(paused.Add(35 * time.Second)))
	kafkaScript(t, script, "resume")

	// Outage 2, a crash: while the relay publishes that backlog and the
	// consumers read a second batch. The second batch is produced beside
	// the watch for the relay's first publish (the relay's backoff decides
	// when that comes), and the broker is killed as soon as it is seen.
	second := batch(1, batch2Size)
	produced := make(chan error, 1)
	go func() { produced <- tryProduceOrders(brokers, s.orderTopic, second) }()
	deadline := time.Now().Add(crashWithin)
	for s.count(`SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the relay did not start on the backlog within %s of the broker's return", crashWithin)
		}
		time.Sleep(2 * time.Millisecond)
	}
	kafkaScript(t, script, "pause", "kill")
	left := s.count(`SELECT count(*) FROM outbox_event WHERE published_at IS NULL`)
	t.Logf("broker crashed with %d events still to publish, %d of %d orders projected", left, s.projected(append(first, second...)), len(first)+len(second))
	if left == 0 {
		t.Fatal("the relay had published the whole backlog before the crash: the crash missed the publishing")
	}
	time.Sleep(2 * time.Second)
	kafkaScript(t, script, "resume")
	if err := <-produced; err != nil {
		t.Fatalf("producing batch 2 across the crash: %v", err)
	}

	// Nothing lost, nothing applied twice: every order projected, with its
	// first copy's amount, and one processed_event row per distinct event.
	all := append(first, second...)
	waitFor(t, 120*time.Second, "every order event projected", func() bool { return s.projected(all) == len(all) })
	for _, o := range all {
		var amount string
		must(t, s.db.QueryRow(t.Context(), `SELECT amount::text FROM order_projection WHERE order_id = $1`, o.order).Scan(&amount))
		if !strings.HasPrefix(amount, o.amount) {
			t.Fatalf("order %d: projected amount %s, want %s: a duplicate event was applied", o.order, amount, o.amount)
		}
	}
	if n := s.count(`SELECT count(*) FROM processed_event`); n != len(all) {
		t.Fatalf("processed_event has %d rows for %d distinct events", n, len(all))
	}

	// Charge some of batch 2 too; every payment's event reaches the topic
	// with one distinct eventId.
	charged = append(charged, second[:charges]...)
	answers = append(answers, s.settleAll(second[:charges], chargers, 30*time.Second)...)
	require(t, c.check(charged, answers), "after two broker outages")
	require(t, c.checkGlobal(), "after two broker outages")
	t.Logf("events redelivered after the outages (same eventId, deduplicated by consumers): %d", c.redeliveries)
}

// kafkaScript runs scripts/kafka-local.sh with args, bounded by 3 minutes.
func kafkaScript(t *testing.T, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, script, args...).CombinedOutput() //nolint:gosec // G702: the repository's Kafka script, or the developer's (FAULT_KAFKA_SCRIPT)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	t.Logf("kafka-local.sh %s: %s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
}

// produceOrders publishes an OrderCreated.v1 event per op, each twice with
// the same eventId: the copy carries another amount and a later date, so
// that applying it would show.
func produceOrders(t *testing.T, brokers []string, topic string, ops []op) {
	t.Helper()
	if err := tryProduceOrders(brokers, topic, ops); err != nil {
		t.Fatalf("producing order events: %v", err)
	}
}

// tryProduceOrders is produceOrders for a goroutine of the test: it returns
// its error rather than failing the test.
func tryProduceOrders(brokers []string, topic string, ops []op) (err error) {
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	defer func() { err = errors.Join(err, w.Close()) }()
	now := time.Now().UTC()
	var msgs []kafka.Message
	for _, o := range ops {
		id := uuid.New().String()
		for copyN := range 2 {
			amount := o.amount
			if copyN == 1 {
				amount = "9" + amount
			}
			v, _ := json.Marshal(map[string]any{
				"eventId": id, "eventType": "OrderCreated.v1", "orderId": o.order, "customerId": o.customer,
				"amount": amount, "currency": "RUB", "occurredAt": now.Add(time.Duration(copyN) * time.Second).Format(time.RFC3339Nano),
			})
			msgs = append(msgs, kafka.Message{Key: []byte(strconv.FormatInt(o.order, 10)), Value: v})
		}
	}
	// Right after a restart the broker may not have elected the topic's
	// leaders yet, or it may be killed while this writes: retry for a while. A partly written batch written again
	// only adds copies with the same eventIds, which the consumer drops.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.WriteMessages(ctx, msgs...)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// projected counts the ops whose order is in the projection.
func (s *stack) projected(ops []op) int {
	return len(s.projectedOps(ops))
}

func (s *stack) projectedOps(ops []op) []op {
	ids := make([]int64, len(ops))
	for i, o := range ops {
		ids[i] = o.order
	}
	rows, err := s.db.Query(context.Background(), `SELECT order_id FROM order_projection WHERE order_id = ANY($1)`, ids)
	must(s.t, err)
	defer rows.Close()
	in := map[int64]bool{}
	for rows.Next() {
		var id int64
		must(s.t, rows.Scan(&id))
		in[id] = true
	}
	must(s.t, rows.Err())
	var out []op
	for _, o := range ops {
		if in[o.order] {
			out = append(out, o)
		}
	}
	return out
}
