package idempotent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/example/payment-service/internal/kafkatest"
)

const readTimeout = 30 * time.Second

func newTestProducer(t testing.TB, brokers []string, topic string, tweak func(*Config)) *Producer {
	t.Helper()
	cfg := Config{
		Brokers:         brokers,
		Topic:           topic,
		RequestTimeout:  5 * time.Second,
		RetryBackoff:    10 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond,
		MetadataTTL:     500 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// assertExactlyOnceInOrder checks that the records hold every value of want
// exactly once and that, per key, values appear in the order given, all in
// one partition.
func assertExactlyOnceInOrder(t *testing.T, got []kafkatest.Record, want map[string][]string) {
	t.Helper()
	gotByKey := map[string][]string{}
	partOfKey := map[string]int{}
	for _, r := range got {
		k := string(r.Key)
		if p, ok := partOfKey[k]; ok && p != r.Partition {
			t.Errorf("key %q in partitions %d and %d", k, p, r.Partition)
		}
		partOfKey[k] = r.Partition
		gotByKey[k] = append(gotByKey[k], string(r.Value))
	}
	total := 0
	for k, vs := range want {
		total += len(vs)
		if fmt.Sprint(gotByKey[k]) != fmt.Sprint(vs) {
			t.Errorf("key %q holds %d values %s, want %d values %s", k, len(gotByKey[k]), abbrev(gotByKey[k]), len(vs), abbrev(vs))
		}
	}
	if len(got) != total {
		t.Errorf("topic holds %d records, want %d", len(got), total)
	}
}

func abbrev(vs []string) string {
	if len(vs) > 12 {
		return fmt.Sprint(vs[:6]) + "..." + fmt.Sprint(vs[len(vs)-6:])
	}
	return fmt.Sprint(vs)
}

// TestPublishLostAck: the broker appends a batch but its acknowledgement is
// lost (the proxy swallows the response and closes the connection). The
// producer resends the same batch with the same sequence and the broker
// must not append it twice.
func TestPublishLostAck(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)

	tests := []struct {
		name       string
		partitions int
		keys       []string
		publishes  int
		perPublish int
		drop       []int64 // 1-based produce requests whose response is lost
	}{
		{"first batch", 1, []string{"k"}, 5, 3, []int64{1}},
		{"middle batch", 1, []string{"k"}, 5, 3, []int64{3}},
		{"resend lost too", 1, []string{"k"}, 5, 3, []int64{2, 3, 4}},
		{"every batch once", 1, []string{"k"}, 5, 3, []int64{1, 3, 5, 7, 9}},
		{"several partitions", 3, []string{"a", "b", "c", "d", "e"}, 6, 10, []int64{2, 7, 11}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topic := kafkatest.CreateTopic(t, brokers, tt.partitions)
			proxy := newAckDropper(t, tt.drop...)
			p := newTestProducer(t, brokers, topic, func(c *Config) { c.Dial = proxy.Dial })
			ctx := testContext(t)

			want := map[string][]string{}
			batches := 0
			for i := range tt.publishes {
				var msgs []Message
				parts := map[int]bool{}
				for j := range tt.perPublish {
					k := tt.keys[(i+j)%len(tt.keys)]
					v := fmt.Sprintf("%s-%d-%d", k, i, j)
					msgs = append(msgs, Message{Key: []byte(k), Value: []byte(v)})
					want[k] = append(want[k], v)
					parts[partitionOf(k, tt.partitions)] = true
				}
				batches += len(parts)
				if err := p.Publish(ctx, msgs...); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}

			if got := proxy.dropped.Load(); got != int64(len(tt.drop)) {
				t.Fatalf("proxy dropped %d acknowledgements, want %d", got, len(tt.drop))
			}
			// Every lost ack caused exactly one resend, and nothing else
			// was resent.
			if got, want := proxy.produces.Load(), int64(batches+len(tt.drop)); got != want {
				t.Fatalf("proxy saw %d produce requests, want %d (%d batches + %d resends)", got, want, batches, len(tt.drop))
			}
			assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout), want)
		})
	}
}

// TestLostAckWithoutIdempotenceDuplicates is the control for
// TestPublishLostAck: the same proxy and the same resend, but with
// kafka-go's unstamped batch (producer id -1), which is what kafka-go's
// Writer sends. The broker appends it twice. If this ever stops
// duplicating, the lost-ack test no longer proves anything.
func TestLostAckWithoutIdempotenceDuplicates(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)
	proxy := newAckDropper(t, 1)
	tr := &kafka.Transport{Dial: proxy.Dial}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 5 * time.Second}
	ctx := testContext(t)

	raw, err := encodeBatch([]Message{{Key: []byte("k"), Value: []byte("v")}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	acked := false
	for attempt := 1; attempt <= 5 && !acked; attempt++ {
		res, err := client.RawProduce(ctx, &kafka.RawProduceRequest{
			Topic: topic, RequiredAcks: kafka.RequireAll,
			RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
		})
		acked = err == nil && res.Error == nil
	}
	if !acked {
		t.Fatal("batch never acknowledged")
	}
	if got := len(kafkatest.ReadAll(t, brokers, topic, readTimeout)); got != 2 {
		t.Fatalf("topic holds %d records, want the duplicate (2)", got)
	}
}

// TestBrokerSequenceChecks drives the broker directly with stamped batches
// to pin down the answers the producer's policy relies on: a resend of an
// appended batch is not appended again, and a gap is refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER and appends nothing.
func TestBrokerSequenceChecks(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 5 * time.Second}
	ctx := testContext(t)

	init, err := client.InitProducerID(ctx, &kafka.InitProducerIDRequest{})
	if err != nil || init.Error != nil {
		t.Fatalf("InitProducerID: %v %v", err, init.Error)
	}
	id, epoch := int64(init.Producer.ProducerID), int16(init.Producer.ProducerEpoch)

	steps := []struct {
		name       string
		seq        int32
		values     []string
		wantErr    error // nil: accepted
		wantOffset int64 // base offset when accepted
	}{
		{"first batch", 0, []string{"a", "b"}, nil, 0},
		{"same batch resent", 0, []string{"a", "b"}, nil, 0},
		{"gap", 5, []string{"x"}, kafka.OutOfOrderSequenceNumber, 0},
		{"next in order", 2, []string{"c"}, nil, 2},
		{"resend of older batch", 0, []string{"a", "b"}, nil, 0},
	}
	for _, s := range steps {
		var msgs []Message
		for _, v := range s.values {
			msgs = append(msgs, Message{Value: []byte(v)})
		}
		raw, err := encodeBatch(msgs, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := stampProducer(raw[4:], id, epoch, s.seq); err != nil {
			t.Fatal(err)
		}
		res, err := client.RawProduce(ctx, &kafka.RawProduceRequest{
			Topic: topic, RequiredAcks: kafka.RequireAll,
			RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
		})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		switch {
		case s.wantErr != nil:
			if !errors.Is(res.Error, s.wantErr) {
				t.Fatalf("%s: error %v, want %v", s.name, res.Error, s.wantErr)
			}
		case errors.Is(res.Error, kafka.DuplicateSequenceNumber):
			// Older brokers answer a duplicate this way; also fine.
		case res.Error != nil:
			t.Fatalf("%s: error %v, want success", s.name, res.Error)
		case res.BaseOffset != s.wantOffset:
			t.Fatalf("%s: base offset %d, want %d", s.name, res.BaseOffset, s.wantOffset)
		}
	}

	var got []string
	for _, r := range kafkatest.ReadAll(t, brokers, topic, readTimeout) {
		got = append(got, string(r.Value))
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("topic holds %q, want [a b c]", got)
	}
}

// TestPublishRecoversFromSequenceGap makes the producer's sequence run ahead
// of the broker's (what the producer sees when the broker lost records or
// producer state). The broker answers OUT_OF_ORDER_SEQUENCE_NUMBER; the
// producer must move that partition to a fresh producer id, resend from
// sequence 0 and lose nothing.
func TestPublishRecoversFromSequenceGap(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)

	tests := []struct {
		name       string
		partitions int
		gapParts   []int
	}{
		{"one partition", 1, []int{0}},
		{"one of three partitions", 3, []int{1}},
		{"all of three partitions", 3, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topic := kafkatest.CreateTopic(t, brokers, tt.partitions)
			p := newTestProducer(t, brokers, topic, nil)
			ctx := testContext(t)
			keys := keysCoveringPartitions(t, tt.partitions)

			want := map[string][]string{}
			publish := func(round int) {
				t.Helper()
				var msgs []Message
				for _, k := range keys {
					for j := range 3 {
						v := fmt.Sprintf("%s-%d-%d", k, round, j)
						msgs = append(msgs, Message{Key: []byte(k), Value: []byte(v)})
						want[k] = append(want[k], v)
					}
				}
				if err := p.Publish(ctx, msgs...); err != nil {
					t.Fatalf("publish round %d: %v", round, err)
				}
			}

			publish(0)
			before := map[int]identity{}
			for _, part := range tt.gapParts {
				ps := p.partition(part)
				before[part] = ps.ident
				ps.seq = nextSequence(ps.seq, 7) // the broker never saw these 7
			}
			publish(1)
			publish(2)

			for _, part := range tt.gapParts {
				if got := p.partition(part).ident; got == before[part] || !got.valid() {
					t.Errorf("partition %d still uses producer id %d after the gap", part, got.id)
				}
			}
			assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout), want)
		})
	}
}

// TestPublishGivesUpWithUnknownOutcome: every acknowledgement of a batch is
// lost until the caller's context ends, although the broker appended the
// batch. Publish must fail, and the next batch (same size, same partition)
// must still be appended: reusing the abandoned batch's sequence numbers
// would make the broker take it for a duplicate and drop it silently.
func TestPublishGivesUpWithUnknownOutcome(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)
	proxy := newAckDropper(t)
	p := newTestProducer(t, brokers, topic, func(c *Config) { c.Dial = proxy.Dial })
	ctx := testContext(t)

	batch := func(name string) []Message {
		return []Message{{Key: []byte("k"), Value: []byte(name + "-0")}, {Key: []byte("k"), Value: []byte(name + "-1")}}
	}
	if err := p.Publish(ctx, batch("a")...); err != nil {
		t.Fatal(err)
	}

	proxy.dropAll.Store(true)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := p.Publish(short, batch("b")...)
	cancel()
	proxy.dropAll.Store(false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish with every ack lost = %v, want deadline exceeded", err)
	}
	if proxy.dropped.Load() == 0 {
		t.Fatal("proxy dropped nothing")
	}

	if err := p.Publish(ctx, batch("c")...); err != nil {
		t.Fatal(err)
	}
	// b's outcome was unknown to the producer but the broker wrote it
	// (the proxy forwarded every request): all three batches are there.
	assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout),
		map[string][]string{"k": {"a-0", "a-1", "b-0", "b-1", "c-0", "c-1"}})
}

// TestConcurrentPublishKeepsKeyOrder publishes from many goroutines at once,
// several keys per goroutine and several goroutines per partition, with a
// few acknowledgements lost on the way. Per key, the topic must hold every
// value once, in publish order.
func TestConcurrentPublishKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 4)
	proxy := newAckDropper(t, 5, 17, 40)
	p := newTestProducer(t, brokers, topic, func(c *Config) { c.Dial = proxy.Dial })
	ctx := testContext(t)

	const (
		goroutines   = 8
		keysPerG     = 2
		publishesPer = 40
	)
	want := map[string][]string{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		keys := make([]string, keysPerG)
		for i := range keys {
			keys[i] = fmt.Sprintf("g%d-k%d", g, i)
		}
		// Precompute what each key should hold.
		var plan [][]Message
		for i := range publishesPer {
			var msgs []Message
			for j := range 1 + i%3 {
				k := keys[(i+j)%keysPerG]
				v := fmt.Sprintf("%s-%04d-%d", k, i, j)
				msgs = append(msgs, Message{Key: []byte(k), Value: []byte(v)})
				want[k] = append(want[k], v)
			}
			plan = append(plan, msgs)
		}
		wg.Go(func() {
			for i, msgs := range plan {
				if err := p.Publish(ctx, msgs...); err != nil {
					errs <- fmt.Errorf("goroutine %d publish %d: %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := proxy.dropped.Load(); got != 3 {
		t.Fatalf("proxy dropped %d acknowledgements, want 3", got)
	}
	assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout), want)
}

// TestPublishManyMessages sends enough data that each Publish is split into
// several batches per partition.
func TestPublishManyMessages(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 6)
	p := newTestProducer(t, brokers, topic, func(c *Config) { c.MaxBatchBytes = 8 << 10 })
	ctx := testContext(t)

	const (
		goroutines = 4
		perG       = 5000
		chunk      = 1000
		keys       = 50
	)
	want := map[string][]string{}
	plans := make([][]Message, goroutines)
	for g := range goroutines {
		for i := range perG {
			k := fmt.Sprintf("g%d-key-%d", g, i%keys)
			v := fmt.Sprintf("%s-%05d-%s", k, i, strings.Repeat("x", 40))
			plans[g] = append(plans[g], Message{Key: []byte(k), Value: []byte(v)})
			want[k] = append(want[k], v)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for g, plan := range plans {
		wg.Go(func() {
			for len(plan) > 0 && errs[g] == nil {
				n := min(chunk, len(plan))
				errs[g] = p.Publish(ctx, plan[:n]...)
				plan = plan[n:]
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout), want)
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)

	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		p := newTestProducer(t, brokers, topic, nil)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(testContext(t), Message{Value: []byte("v")}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Publish after Close = %v, want ErrClosed", err)
		}
	})
	t.Run("close while publishing", func(t *testing.T) {
		t.Parallel()
		p := newTestProducer(t, brokers, topic, nil)
		ctx := testContext(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Go(func() {
				for i := range 200 {
					err := p.Publish(ctx, Message{Key: []byte(fmt.Sprint(g)), Value: []byte(fmt.Sprint(i))})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		// Publishers stop by themselves; the ones that noticed the
		// close report ErrClosed, not some other failure.
		for err := range errs {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Publish during Close = %v, want nil or ErrClosed", err)
			}
		}
	})
	t.Run("missing topic stops with the context", func(t *testing.T) {
		t.Parallel()
		p := newTestProducer(t, brokers, kafkatest.TopicName(t), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := p.Publish(ctx, Message{Value: []byte("v")}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Publish to a missing topic = %v, want deadline exceeded", err)
		}
	})
	t.Run("no messages", func(t *testing.T) {
		t.Parallel()
		p := newTestProducer(t, brokers, topic, nil)
		if err := p.Publish(testContext(t)); err != nil {
			t.Fatalf("Publish() = %v", err)
		}
	})
	t.Run("config", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []Config{{Topic: "t"}, {Brokers: brokers}} {
			if _, err := New(cfg); err == nil {
				t.Errorf("New(%+v) succeeded", cfg)
			}
		}
	})
}

// partitionOf is where the default balancer puts key.
func partitionOf(key string, partitions int) int {
	ids := make([]int, partitions)
	for i := range ids {
		ids[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, ids...)
}

// keysCoveringPartitions returns one key per partition.
func keysCoveringPartitions(t *testing.T, partitions int) []string {
	t.Helper()
	keys := make([]string, partitions)
	found := 0
	for i := 0; i < 10000 && found < partitions; i++ {
		k := fmt.Sprintf("key-%d", i)
		if part := partitionOf(k, partitions); keys[part] == "" {
			keys[part] = k
			found++
		}
	}
	if found < partitions {
		t.Fatalf("no keys for all %d partitions", partitions)
	}
	return keys
}
