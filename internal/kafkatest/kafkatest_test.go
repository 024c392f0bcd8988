package kafkatest

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestTopicNameUniqueAndLegal(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		n := TopicName(t)
		if seen[n] {
			t.Fatalf("duplicate topic name %q", n)
		}
		seen[n] = true
		for _, r := range n {
			legal := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
			if !legal {
				t.Fatalf("illegal rune %q in topic name %q", r, n)
			}
		}
	}
}

func TestExternalBrokersParsesEnv(t *testing.T) {
	tests := []struct {
		env  string
		want []string
	}{
		{"", nil},
		{" , ", nil},
		{"a:1", []string{"a:1"}},
		{"a:1, b:2 ,", []string{"a:1", "b:2"}},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(EnvBrokers, tt.env)
			got := ExternalBrokers()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("ExternalBrokers() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCreateProduceReadAll checks the round trip the other packages' tests
// rely on: a created topic has the requested partitions, and ReadAll returns
// exactly what was produced, per partition in offset order.
func TestCreateProduceReadAll(t *testing.T) {
	t.Parallel()
	brokers := Brokers(t)

	tests := []struct {
		name       string
		partitions int
		perPart    int
	}{
		{"one partition", 1, 5},
		{"three partitions", 3, 4},
		{"empty topic", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topic := CreateTopic(t, brokers, tt.partitions)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client, done := newClient(brokers)
			defer done()
			for p := range tt.partitions {
				if tt.perPart == 0 {
					continue
				}
				var recs []kafka.Record
				for i := range tt.perPart {
					recs = append(recs, kafka.Record{
						Key:   kafka.NewBytes([]byte("k" + strconv.Itoa(p))),
						Value: kafka.NewBytes([]byte(fmt.Sprintf("p%d-%d", p, i))),
					})
				}
				res, err := client.Produce(ctx, &kafka.ProduceRequest{
					Topic:        topic,
					Partition:    p,
					RequiredAcks: kafka.RequireAll,
					Records:      kafka.NewRecordReader(recs...),
				})
				if err != nil {
					t.Fatalf("produce: %v", err)
				}
				if res.Error != nil {
					t.Fatalf("produce: %v", res.Error)
				}
			}

			got := ReadAll(t, brokers, topic, 20*time.Second)
			if len(got) != tt.partitions*tt.perPart {
				t.Fatalf("read %d records, want %d", len(got), tt.partitions*tt.perPart)
			}
			for i, r := range got {
				p, n := i/max(tt.perPart, 1), i%max(tt.perPart, 1)
				want := fmt.Sprintf("p%d-%d", p, n)
				if r.Partition != p || r.Offset != int64(n) || string(r.Value) != want {
					t.Fatalf("record %d = partition %d offset %d value %q, want partition %d offset %d value %q",
						i, r.Partition, r.Offset, r.Value, p, n, want)
				}
			}
		})
	}
}

// TestStartInProcessFixedPort shows the dev-command use: one broker on a
// port chosen by the caller.
func TestStartInProcessFixedPort(t *testing.T) {
	t.Parallel()
	// Ask the kernel for a free loopback port, then release it for kfake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}

	c, addrs, err := StartInProcess(kfake.Ports(port))
	if err != nil {
		t.Fatalf("StartInProcess: %v", err)
	}
	defer c.Close()
	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if len(addrs) != 1 || addrs[0] != want {
		t.Fatalf("addrs = %q, want [%q]", addrs, want)
	}
	topic := CreateTopic(t, addrs, 2)
	if got := ReadAll(t, addrs, topic, 10*time.Second); len(got) != 0 {
		t.Fatalf("new topic holds %d records", len(got))
	}
}

// Tail returns each record once: what was there, then only what came after.
func TestTailReadsOnlyWhatIsNew(t *testing.T) {
	t.Parallel()
	brokers := Brokers(t)
	topic := CreateTopic(t, brokers, 2)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.RoundRobin{}, BatchSize: 1}
	defer func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tail := NewTail(brokers, topic)
	write := func(vals ...string) {
		for _, v := range vals {
			if err := w.WriteMessages(ctx, kafka.Message{Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func() []string {
		recs, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		sort.Strings(out)
		return out
	}
	write("a", "b", "c")
	if got := read(); strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("first Next = %v, want a,b,c", got)
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("Next with nothing new = %v, want nothing", got)
	}
	write("d", "e")
	if got := read(); strings.Join(got, ",") != "d,e" {
		t.Fatalf("Next after two more = %v, want d,e", got)
	}
}
