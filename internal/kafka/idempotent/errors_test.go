package idempotent

import (
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/example/payment-service/internal/kafkatest"
)

// TestPublishBrokerErrors makes the broker answer produce requests with
// each error the producer's policy distinguishes, using kfake's fault
// injection (so this test always runs against an in-process cluster). The
// faults of kind "...after append" and REQUEST_TIMED_OUT are answered after
// the broker wrote the batch, like a real broker whose replication timed
// out: the retry must be deduplicated.
//
// Each case publishes batch a, injects the fault, publishes b, then c, and
// checks what the topic holds and whether the partition moved to a new
// producer id.
func TestPublishBrokerErrors(t *testing.T) {
	t.Parallel()
	cluster, brokers := kafkatest.Cluster(t)

	// fault answers the next count produce requests for the topic with
	// err; the returned check reports how many it answered.
	fault := func(err *kerr.Error, count int) func(string) func() (hits, want int) {
		return func(topic string) func() (int, int) {
			h := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: count})
			return func() (int, int) { return h.Hits(), count }
		}
	}
	tests := []struct {
		name        string
		inject      func(topic string) (check func() (hits, want int))
		wantBErr    error // nil: b succeeds
		bWritten    bool
		cFails      bool // the producer is stopped for good
		wantRenewed bool // partition moved to a new producer id
		// wantMark: b's error also carries ErrFatal (build a new producer)
		// or ErrRefused (these records will be refused again).
		wantMark error
	}{
		{name: "request timed out after append", inject: fault(kerr.RequestTimedOut, 2), bWritten: true},
		{name: "not enough replicas after append", inject: fault(kerr.NotEnoughReplicasAfterAppend, 2), bWritten: true},
		{name: "not enough replicas", inject: fault(kerr.NotEnoughReplicas, 2), bWritten: true},
		{name: "not leader", inject: fault(kerr.NotLeaderForPartition, 3), bWritten: true},
		{name: "leader not available", inject: fault(kerr.LeaderNotAvailable, 2), bWritten: true},
		{name: "leader moved", inject: func(topic string) func() (int, int) {
			next := (cluster.LeaderFor(topic, 0) + 1) % int32(len(brokers))
			if err := cluster.MoveTopicPartition(topic, 0, next); err != nil {
				t.Error(err)
			}
			return func() (int, int) { return int(cluster.LeaderFor(topic, 0)), int(next) }
		}, bWritten: true},
		{name: "unknown producer id", inject: fault(kerr.UnknownProducerID, 1), bWritten: true, wantRenewed: true},
		{name: "out of order sequence", inject: fault(kerr.OutOfOrderSequenceNumber, 1), bWritten: true, wantRenewed: true},
		{name: "invalid producer epoch", inject: fault(kerr.InvalidProducerEpoch, 1), wantBErr: kafka.InvalidProducerEpoch, wantRenewed: true},
		{name: "producer fenced", inject: fault(kerr.ProducerFenced, 1), wantBErr: kafka.ProducerFenced, cFails: true, wantMark: ErrFatal},
		{name: "message too large", inject: fault(kerr.MessageTooLarge, 1), wantBErr: kafka.MessageSizeTooLarge, wantMark: ErrRefused},
		{name: "topic authorization failed", inject: fault(kerr.TopicAuthorizationFailed, 1), wantBErr: kafka.TopicAuthorizationFailed, wantMark: ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topic := kafkatest.CreateTopic(t, brokers, 1)
			p := newTestProducer(t, brokers, topic, nil)
			ctx := testContext(t)
			batch := func(name string) []Message {
				return []Message{{Key: []byte("k"), Value: []byte(name + "0")}, {Key: []byte("k"), Value: []byte(name + "1")}}
			}

			if err := p.Publish(ctx, batch("a")...); err != nil {
				t.Fatal(err)
			}
			before := p.partition(0).ident

			check := tt.inject(topic)
			err := p.Publish(ctx, batch("b")...)
			if got, want := check(); got != want {
				t.Fatalf("fault check: got %d, want %d (the injected condition did not happen as planned)", got, want)
			}
			if tt.wantBErr == nil && err != nil {
				t.Fatalf("publish b: %v", err)
			}
			if tt.wantBErr != nil && !errors.Is(err, tt.wantBErr) {
				t.Fatalf("publish b = %v, want %v", err, tt.wantBErr)
			}
			for _, mark := range []error{ErrFatal, ErrRefused} {
				if got, want := errors.Is(err, mark), mark == tt.wantMark; got != want { //nolint:errorlint // which of the two sentinels mark is, not an error returned
					t.Errorf("publish b = %v: errors.Is(%v) = %v, want %v", err, mark, got, want)
				}
			}

			err = p.Publish(ctx, batch("c")...)
			if tt.cFails {
				if !errors.Is(err, tt.wantBErr) || !errors.Is(err, ErrFatal) {
					t.Fatalf("publish c after a fatal error = %v, want %v", err, tt.wantBErr)
				}
			} else if err != nil {
				t.Fatalf("publish c: %v", err)
			}

			if renewed := p.partition(0).ident != before; renewed != tt.wantRenewed && !tt.cFails {
				t.Errorf("partition moved to a new producer id: %v, want %v", renewed, tt.wantRenewed)
			}

			want := []string{"a0", "a1"}
			if tt.bWritten {
				want = append(want, "b0", "b1")
			}
			if !tt.cFails {
				want = append(want, "c0", "c1")
			}
			assertExactlyOnceInOrder(t, kafkatest.ReadAll(t, brokers, topic, readTimeout), map[string][]string{"k": want})
		})
	}
}
