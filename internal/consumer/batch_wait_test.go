package consumer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/kafkatest"
)

// fetchSizes fetches records records from topic under a group of its own
// with the batch wait given, and returns the batches' sizes.
func fetchSizes(t *testing.T, brokers []string, topic string, wait time.Duration, records int) []int {
	t.Helper()
	cfg := testConfig(brokers, topic, topic+".DLT")
	cfg.BatchSize, cfg.BatchWait = records, wait
	l, err := newLoop(cfg, "test consumer", "test", nil, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.reader.Close(); _ = l.dlt.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sizes []int
	for got := 0; got < records; {
		batch, err := l.fetchBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(batch))
		got += len(batch)
	}
	return sizes
}

// NoBatchWait hands each record on as it comes, even when more are
// already there (the saga's commands at SAGA_CONSUMER_BATCH_WAIT=0: a step
// starts without waiting for others); a batch wait gathers them, and a
// zero one is the default's 10 ms, not no wait.
func TestBatchWaitNoneHandsEachRecordOnAlone(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 1)
	base := time.Now()
	publish(t, brokers, topic, events(newEvent(1, "1", base), newEvent(2, "2", base), newEvent(3, "3", base))...)

	if got := fetchSizes(t, brokers, topic, NoBatchWait, 3); len(got) != 3 {
		t.Errorf("NoBatchWait: batches of %v, want three of one", got)
	}
	if got := fetchSizes(t, brokers, topic, time.Minute, 3); len(got) != 1 {
		t.Errorf("a minute's wait: batches of %v, want one of three", got)
	}
	cfg := testConfig(brokers, topic, topic+".DLT")
	cfg.BatchWait = 0
	l, err := newLoop(cfg, "test consumer", "test", nil, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.reader.Close(); _ = l.dlt.Close() }()
	if l.cfg.BatchWait != 10*time.Millisecond {
		t.Errorf("a zero BatchWait became %s, want the default 10ms", l.cfg.BatchWait)
	}
}
