package outbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/outbox"
)

// twoTopics writes three rows for each of two topics, alternating, as
// saga steps write their payment event and their reply; they fit one
// batch of the relay (relayConfig's 10).
func twoTopics(t *testing.T, e *env) (events, replies *env) {
	t.Helper()
	replies = e.withTopic(t, kafkatest.CreateTopic(t, e.brokers, 1))
	for i := range int64(3) {
		e.writeEvent(t, 1001+i, 2*i+1)
		replies.writeEvent(t, 1001+i, 2*i+2)
	}
	return e, replies
}

// rowsOf are the outbox rows addressed to topic.
func rowsOf(t *testing.T, e *env, topic string) []outboxRow {
	t.Helper()
	var out []outboxRow
	for _, r := range e.rows(t) {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// rendezvous is a publisher whose Publish goes on only once the other
// topic's Publish has started too: a relay that publishes a batch's topics
// one after the other never gets past the first.
type rendezvous struct {
	outbox.Publisher
	mine, other chan struct{}
	once        *sync.Once
	stuck       *atomic.Int32
}

func (p rendezvous) Publish(ctx context.Context, msgs ...idempotent.Message) error {
	p.once.Do(func() { close(p.mine) })
	select {
	case <-p.other:
	case <-time.After(5 * time.Second):
		p.stuck.Add(1)
		return errors.New("the other topic's publish did not start while this one waited")
	}
	return p.Publisher.Publish(ctx, msgs...)
}

// A batch of two topics (a saga step's payment event and its reply) is
// published to both at once: the reply does not wait for the event's
// acknowledgement. Each topic gets its rows once, in id order per key.
func TestRelayPublishesABatchsTopicsAtOnce(t *testing.T) {
	t.Parallel()
	events, replies := twoTopics(t, newEnv(t, 1))
	started := map[string]chan struct{}{events.topic: make(chan struct{}), replies.topic: make(chan struct{})}
	onces := map[string]*sync.Once{events.topic: {}, replies.topic: {}}
	var stuck atomic.Int32
	cfg := events.relayConfig()
	cfg.RetryBackoff, cfg.MaxRetryBackoff = 10*time.Millisecond, 50*time.Millisecond
	cfg.NewPublisher = func(topic string) (outbox.Publisher, error) {
		pub, err := events.newPublisher(topic)
		if err != nil {
			return nil, err
		}
		other := replies.topic
		if topic == replies.topic {
			other = events.topic
		}
		return rendezvous{Publisher: pub, mine: started[topic], other: started[other], once: onces[topic], stuck: &stuck}, nil
	}
	runRelay(t, cfg)
	waitFor(t, "every row published, or a publish that waited alone", func() bool {
		return stuck.Load() > 0 || events.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NULL`) == 0
	})
	if n := stuck.Load(); n > 0 {
		t.Fatalf("%d publishes waited in vain for the other topic's: the relay publishes a batch's topics one after the other", n)
	}
	checkTopic(t, kafkatest.ReadAll(t, events.brokers, events.topic, 30*time.Second), rowsOf(t, events, events.topic), once)
	checkTopic(t, kafkatest.ReadAll(t, events.brokers, replies.topic, 30*time.Second), rowsOf(t, events, replies.topic), once)
}

// One topic of a batch failing leaves every row of the batch unpublished,
// the other topic's too, although its publish went through: a batch is
// marked as a whole, once every topic has its rows. Each retry sends the
// other topic's
// rows again with the same eventIds (the copies consumers drop), and once
// the failing topic takes its rows every row is marked, each topic's in id
// order per key.
func TestRelayMarksNothingOfABatchWhenOneTopicFails(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)
	events, replies := twoTopics(t, newEnvOn(t, brokers, 1))
	refused := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: replies.topic, Err: kerr.PolicyViolation, Count: -1})

	cfg := events.relayConfig()
	cfg.RetryBackoff, cfg.MaxRetryBackoff = 10*time.Millisecond, 50*time.Millisecond
	runRelay(t, cfg)
	waitFor(t, "three refused publishes of the replies", func() bool { return refused.Hits() >= 3 })
	if n := events.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`); n != 0 {
		t.Fatalf("%d rows marked published while the replies' topic refuses them, want 0", n)
	}
	refused.Remove()
	events.waitAllPublished(t, 6)

	// Every attempt published the events' rows; the last one, the
	// replies' too.
	attempts := refused.Hits() + 1
	checkTopic(t, kafkatest.ReadAll(t, events.brokers, events.topic, 30*time.Second), rowsOf(t, events, events.topic),
		func(outboxRow) int { return attempts })
	checkTopic(t, kafkatest.ReadAll(t, events.brokers, replies.topic, 30*time.Second), rowsOf(t, events, replies.topic), once)
}
