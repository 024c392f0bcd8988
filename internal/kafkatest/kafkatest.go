// Package kafkatest gives tests a real Kafka-protocol broker and a few
// helpers to create topics and read back what they hold.
//
// Tests in this service assert on what a topic finally contains, not on calls
// made to a mock, so they need a broker that speaks the Kafka wire protocol
// and enforces its rules (idempotent sequence checks, acks, leadership). By
// default that broker is an in-process kfake cluster
// (github.com/twmb/franz-go/pkg/kfake) listening on 127.0.0.1, so `go test`
// needs nothing installed. Setting KAFKA_BROKERS (comma-separated host:port
// list) points the same tests at an external cluster such as Apache Kafka;
// every test then uses its own uniquely named topic so tests can share it.
//
// The helpers use segmentio/kafka-go, the client the service itself uses,
// so a topic created here behaves like one created by operations tooling:
// explicitly, with a chosen partition count, never by auto-creation.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// EnvBrokers names the environment variable that, when set, makes Brokers
// return an external cluster instead of starting an in-process one.
const EnvBrokers = "KAFKA_BROKERS"

// defaultGroupMinSessionTimeout lets consumer-group tests use short session
// timeouts; kfake otherwise refuses anything under 6 s, which would make
// rebalance tests slow.
const defaultGroupMinSessionTimeout = 100 * time.Millisecond

// Brokers returns the bootstrap addresses of a Kafka-protocol cluster for t.
//
// With KAFKA_BROKERS set, those addresses are returned and nothing is started.
// Otherwise an in-process kfake cluster is started on loopback and closed by
// t.Cleanup; opts are passed to it (they are ignored for an external
// cluster).
func Brokers(t testing.TB, opts ...kfake.Opt) []string {
	t.Helper()
	if addrs := ExternalBrokers(); len(addrs) > 0 {
		return addrs
	}
	_, addrs := Cluster(t, opts...)
	return addrs
}

// Cluster always starts an in-process kfake cluster for t, whatever
// KAFKA_BROKERS says, and returns it with its addresses. It is for tests
// that must steer the broker (kfake's Fault injection, moving partition
// leaders), which an external cluster does not allow. The cluster is closed
// by t.Cleanup.
func Cluster(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, []string) {
	t.Helper()
	c, addrs, err := StartInProcess(opts...)
	if err != nil {
		t.Fatalf("kafkatest: start in-process cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c, addrs
}

// ExternalBrokers returns the addresses listed in KAFKA_BROKERS, or nil when
// it is unset or blank.
func ExternalBrokers() []string {
	var addrs []string
	for _, a := range strings.Split(os.Getenv(EnvBrokers), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// StartInProcess starts a kfake cluster outside of any test, for example for
// a local development command, and returns it with its listen addresses. The
// caller must Close the cluster.
//
// Brokers listen on 127.0.0.1 only. By default kfake starts three brokers on
// random ports; pass kfake.Ports(9092) for one broker on a fixed port
// (kfake.Ports(9092, 9093, 9094) for three). opts are applied after this
// package's defaults, so they win.
func StartInProcess(opts ...kfake.Opt) (*kfake.Cluster, []string, error) {
	all := append([]kfake.Opt{kfake.GroupMinSessionTimeout(defaultGroupMinSessionTimeout)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, nil, err
	}
	return c, c.ListenAddrs(), nil
}

// TopicName returns a topic name unique to this call, derived from the test
// name so a shared broker's topic list stays readable.
func TopicName(t testing.TB) string {
	t.Helper()
	var suffix [6]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		t.Fatalf("kafkatest: random topic suffix: %v", err)
	}
	// Legal topic characters are [a-zA-Z0-9._-]; map everything else.
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		default:
			return '_'
		}
	}, t.Name())
	if len(name) > 200 {
		name = name[:200]
	}
	return "test." + name + "." + hex.EncodeToString(suffix[:])
}

// CreateTopic creates a uniquely named topic with the given number of
// partitions and returns its name. The replication factor is left to the
// broker's default (-1), so the same call works against a one-broker dev
// cluster and a three-broker one. It fails t if the topic cannot be created
// or does not appear in metadata with all partitions led within 30 s.
func CreateTopic(t testing.TB, brokers []string, partitions int) string {
	t.Helper()
	topic := TopicName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateTopicContext(ctx, brokers, topic, partitions); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return topic
}

// CreateTopicContext creates topic with the given partitions and waits until
// every partition's leader serves it. It is CreateTopic for code outside
// tests (the dev stack).
func CreateTopicContext(ctx context.Context, brokers []string, topic string, partitions int) error {
	client, done := newClient(brokers)
	defer done()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{
			Topic:             topic,
			NumPartitions:     partitions,
			ReplicationFactor: -1,
		}},
	})
	if err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	if err := res.Errors[topic]; err != nil {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	// A real cluster propagates a new topic asynchronously; wait until a
	// fresh metadata read shows every partition with a leader so the first
	// produce in a test does not race the controller.
	for {
		if ok, err := topicReady(ctx, brokers, topic, partitions); ok {
			return nil
		} else if ctx.Err() != nil {
			return fmt.Errorf("topic %q not ready: %w", topic, errors.Join(ctx.Err(), err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReady(ctx context.Context, brokers []string, topic string, partitions int) (bool, error) {
	client, done := newClient(brokers)
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return false, err
	}
	for _, tp := range md.Topics {
		if tp.Name != topic {
			continue
		}
		if tp.Error != nil {
			return false, tp.Error
		}
		if len(tp.Partitions) != partitions {
			return false, fmt.Errorf("%d of %d partitions", len(tp.Partitions), partitions)
		}
		for _, p := range tp.Partitions {
			if p.Leader.Host == "" {
				return false, fmt.Errorf("partition %d has no leader", p.ID)
			}
		}
		return leadersServe(ctx, client, topic, partitions)
	}
	return false, errors.New("topic not in metadata")
}

// leadersServe asks every partition's leader for its offsets. Apache Kafka
// can name a leader in metadata a moment before that broker serves the
// partition (NOT_LEADER_OR_FOLLOWER until then); a produce in that window
// fails, so the topic is ready only once every leader answers.
func leadersServe(ctx context.Context, client *kafka.Client, topic string, partitions int) (bool, error) {
	reqs := make([]kafka.OffsetRequest, partitions)
	for p := range partitions {
		reqs[p] = kafka.FirstOffsetOf(p)
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return false, err
	}
	if got := len(res.Topics[topic]); got != partitions {
		return false, fmt.Errorf("offsets for %d of %d partitions", got, partitions)
	}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return false, fmt.Errorf("partition %d: %w", po.Partition, po.Error)
		}
	}
	return true, nil
}

// Record is one record read back from a topic.
type Record struct {
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
}

// ReadAll returns every record the topic holds, from each partition's
// earliest offset up to its high-water mark as of the call, ordered by
// partition then offset. Reading stops by itself after timeout; running out
// of time fails t, because a partial read would make assertions lie.
func ReadAll(t testing.TB, brokers []string, topic string, timeout time.Duration) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	recs, err := readAll(ctx, brokers, topic)
	if err != nil {
		t.Fatalf("kafkatest: read %q: %v", topic, err)
	}
	return recs
}

// readAll is a Tail's first look: everything from each partition's earliest
// offset.
func readAll(ctx context.Context, brokers []string, topic string) ([]Record, error) {
	return NewTail(brokers, topic).Next(ctx)
}

// readPartition fetches [from, hwm) of one partition.
func readPartition(ctx context.Context, client *kafka.Client, topic string, partition int, from, hwm int64) ([]Record, error) {
	var out []Record
	for offset := from; offset < hwm; {
		res, err := client.Fetch(ctx, &kafka.FetchRequest{
			Topic:     topic,
			Partition: partition,
			Offset:    offset,
			MinBytes:  1,
			MaxBytes:  8 << 20,
			MaxWait:   100 * time.Millisecond,
		})
		if err != nil {
			return nil, err
		}
		if res.Error != nil {
			return nil, res.Error
		}
		for {
			r, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			rec, err := toRecord(partition, r)
			if err != nil {
				return nil, err
			}
			// A fetch returns whole batches, so it can start before the
			// requested offset and run past the high-water mark snapshot.
			if rec.Offset < offset || rec.Offset >= hwm {
				continue
			}
			out = append(out, rec)
			offset = rec.Offset + 1
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("stopped at offset %d of %d: %w", offset, hwm, err)
		}
	}
	return out, nil
}

func toRecord(partition int, r *kafka.Record) (Record, error) {
	rec := Record{Partition: partition, Offset: r.Offset, Headers: r.Headers}
	var err error
	if rec.Key, err = readBytes(r.Key); err != nil {
		return rec, err
	}
	if rec.Value, err = readBytes(r.Value); err != nil {
		return rec, err
	}
	return rec, nil
}

func readBytes(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer b.Close() //nolint:errcheck // a record's bytes, read: closing hands their buffer back
	return io.ReadAll(b)
}

// newClient returns a client with its own transport, so each helper call
// sees fresh metadata and leaves no pooled connections behind.
func newClient(brokers []string) (*kafka.Client, func()) {
	tr := &kafka.Transport{
		Dial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	return c, tr.CloseIdleConnections
}

// Tail reads a topic incrementally: each Next returns the records appended
// since the previous call, so a long test can check what arrived after each
// step without reading the whole topic again.
type Tail struct {
	brokers []string
	topic   string
	next    map[int]int64 // per partition, the first offset not yet read
}

// NewTail returns a Tail at the topic's beginning.
func NewTail(brokers []string, topic string) *Tail {
	return &Tail{brokers: brokers, topic: topic, next: map[int]int64{}}
}

// Next returns the records appended since the last call (all of them on the
// first), up to each partition's high-water mark as of this call, ordered by
// partition then offset.
func (t *Tail) Next(ctx context.Context) ([]Record, error) {
	client, done := newClient(t.brokers)
	defer done()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{t.topic}})
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, tp := range md.Topics {
		if tp.Name != t.topic {
			continue
		}
		if tp.Error != nil {
			return nil, tp.Error
		}
		for _, p := range tp.Partitions {
			reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("topic %q has no partitions in metadata", t.topic)
	}
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{t.topic: reqs}})
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, po := range offs.Topics[t.topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("partition %d offsets: %w", po.Partition, po.Error)
		}
		from := max(t.next[po.Partition], po.FirstOffset)
		recs, err := readPartition(ctx, client, t.topic, po.Partition, from, po.LastOffset)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", po.Partition, err)
		}
		out = append(out, recs...)
		t.next[po.Partition] = max(from, po.LastOffset)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}
