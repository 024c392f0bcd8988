package outbox_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const waitTimeout = 60 * time.Second

// env is one test's fresh database and topic on a real broker.
type env struct {
	dsn     string
	db      *gorm.DB
	waker   *outbox.Waker
	brokers []string
	topic   string
}

func newEnv(t testing.TB, partitions int) *env {
	t.Helper()
	return newEnvOn(t, kafkatest.Brokers(t), partitions)
}

func newEnvOn(t testing.TB, brokers []string, partitions int) *env {
	t.Helper()
	dsn := testdb.New(t)
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	// The writers wake the relays after their commits, as the service's
	// do; the waker stops before the pool closes.
	waker := outbox.NewWaker(repository.OutboxNotifier(db, nil), slog.New(slog.DiscardHandler))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- waker.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the waker: %v", err)
		}
	})
	topic := kafkatest.CreateTopic(t, brokers, partitions)
	return &env{dsn: dsn, db: db, waker: waker, brokers: brokers, topic: topic}
}

// writeEvent commits one PaymentSucceeded.v1 for order in the outbox, as
// a command's phase 3 writes it, and wakes the relays after the commit, as
// the service's writers do; it returns the eventId. seq becomes the payment
// id, so tests can check order.
func (e *env) writeEvent(t testing.TB, order int64, seq int64) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(eventJSON{
		EventID: id, EventType: app.EventPaymentSucceeded, PaymentID: seq, OrderID: order, CustomerID: 42,
		Amount: "10.50", Currency: "RUB", PaymentProvider: "sandbox", ExternalPaymentID: "pi_" + strconv.FormatInt(seq, 10),
		OccurredAt: time.Now().UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.Exec(`INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload) VALUES (?, ?, ?, ?, ?::json)`,
		id, e.topic, strconv.FormatInt(order, 10), app.EventPaymentSucceeded, string(payload)).Error
	if err != nil {
		t.Fatal(err)
	}
	if e.waker != nil {
		e.waker.Wake()
	}
	return id
}

// writeEvents writes n events over keys orders from writers goroutines.
// Each key belongs to one writer, so one key's transactions commit in the
// order of their ids (concurrent transactions of one key have no order to
// keep; see the package doc).
func (e *env) writeEvents(t testing.TB, n, keys, writers int) {
	t.Helper()
	if keys%writers != 0 {
		t.Fatalf("keys (%d) must be a multiple of writers (%d)", keys, writers)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				e.writeEvent(t, int64(1000+i%keys), int64(i+1))
			}
		})
	}
	wg.Wait()
}

func (e *env) count(t testing.TB, query string) int {
	t.Helper()
	var n int64
	if err := e.db.Raw(query).Scan(&n).Error; err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return int(n)
}

// waitAllPublished waits until every outbox row of the test has
// published_at set and there are want of them.
func (e *env) waitAllPublished(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		pub := e.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`)
		all := e.count(t, `SELECT count(*) FROM outbox_event`)
		if pub == want && all == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows published (want %d) after %s", pub, all, want, waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withTopic is the same database and broker with the outbox writing to
// topic: the service after PAYMENT_EVENTS_TOPIC changed.
func (e *env) withTopic(t testing.TB, topic string) *env {
	t.Helper()
	c := *e
	c.topic = topic
	c.waker = nil // its writes wake no relay: they wait for the poll
	return &c
}

type outboxRow struct {
	ID         int64
	EventID    uuid.UUID
	Topic      string
	MessageKey string
	Payload    string
}

func (e *env) rows(t testing.TB) []outboxRow {
	t.Helper()
	var rows []outboxRow
	if err := e.db.Raw(`SELECT id, event_id, topic, message_key, payload::text AS payload FROM outbox_event ORDER BY id`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	return rows
}

// newPublisher is the relay's publisher for topic, as the service builds it.
func (e *env) newPublisher(topic string) (outbox.Publisher, error) {
	return idempotent.New(idempotent.Config{
		Brokers:         e.brokers,
		Topic:           topic,
		RequestTimeout:  5 * time.Second,
		RetryBackoff:    10 * time.Millisecond,
		MaxRetryBackoff: 200 * time.Millisecond,
		MetadataTTL:     500 * time.Millisecond,
	})
}

// relayConfig is a relay over the real store and producer.
func (e *env) relayConfig() outbox.Config {
	return outbox.Config{
		Store:        repository.NewOutboxRelayStore(e.dsn),
		NewPublisher: e.newPublisher,
		BatchSize:    10,
		PollInterval: 200 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// runRelay runs a relay until the returned stop is called (or the test
// ends) and checks that it stopped cleanly.
func runRelay(t testing.TB, cfg outbox.Config) (stop func()) {
	t.Helper()
	r, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("relay stopped with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("relay did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventJSON is the consumer's view of a payment event, and the value
// writeEvent writes: without a saga, sagaId is absent, as the service's
// writers leave it (api/asyncapi.yaml has no null sagaId).
type eventJSON struct {
	EventID           uuid.UUID `json:"eventId"`
	SagaID            *string   `json:"sagaId,omitempty"`
	EventType         string    `json:"eventType"`
	PaymentID         int64     `json:"paymentId"`
	OrderID           int64     `json:"orderId"`
	CustomerID        int64     `json:"customerId"`
	Amount            string    `json:"amount"`
	Currency          string    `json:"currency"`
	PaymentProvider   string    `json:"paymentProvider"`
	ExternalPaymentID string    `json:"externalPaymentId"`
	OccurredAt        time.Time `json:"occurredAt"`
}

func header(r kafkatest.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// checkTopic compares what the topic holds with the outbox rows: every
// record is a row (same eventId in header and value, same key, same bytes)
// and a valid payment.events message of api/asyncapi.yaml, row i appears
// copies(row) times, and per key the first appearances follow the rows' id
// order, all on one partition.
func checkTopic(t *testing.T, recs []kafkatest.Record, rows []outboxRow, copies func(outboxRow) int) {
	t.Helper()
	asyncapitest.ValidateRecords(t, "payment.events", recs)
	byEventID := map[uuid.UUID]outboxRow{}
	for _, r := range rows {
		byEventID[r.EventID] = r
	}
	seen := map[uuid.UUID]int{}
	firstOrder := map[string][]int64{} // key -> row ids in order of first appearance
	partOfKey := map[string]int{}
	for _, rec := range recs {
		var ev eventJSON
		if err := json.Unmarshal(rec.Value, &ev); err != nil {
			t.Fatalf("record at %d/%d: %v", rec.Partition, rec.Offset, err)
		}
		row, ok := byEventID[ev.EventID]
		switch {
		case !ok:
			t.Fatalf("record with unknown eventId %s", ev.EventID)
		case header(rec, outbox.HeaderEventID) != ev.EventID.String():
			t.Fatalf("eventId header %q, value says %s", header(rec, outbox.HeaderEventID), ev.EventID)
		case header(rec, outbox.HeaderEventType) != ev.EventType || ev.EventType != app.EventPaymentSucceeded:
			t.Fatalf("eventType header %q, value %q", header(rec, outbox.HeaderEventType), ev.EventType)
		case string(rec.Key) != row.MessageKey || string(rec.Key) != strconv.FormatInt(ev.OrderID, 10):
			t.Fatalf("key %q, row key %q, orderId %d", rec.Key, row.MessageKey, ev.OrderID)
		case string(rec.Value) != row.Payload:
			t.Fatalf("value differs from the stored payload:\n%s\n%s", rec.Value, row.Payload)
		}
		if p, ok := partOfKey[row.MessageKey]; ok && p != rec.Partition {
			t.Fatalf("key %s on partitions %d and %d", row.MessageKey, p, rec.Partition)
		}
		partOfKey[row.MessageKey] = rec.Partition
		if seen[ev.EventID] == 0 {
			firstOrder[row.MessageKey] = append(firstOrder[row.MessageKey], row.ID)
		}
		seen[ev.EventID]++
	}
	for _, r := range rows {
		if got, want := seen[r.EventID], copies(r); got != want {
			t.Errorf("row %d (eventId %s) is on the topic %d times, want %d", r.ID, r.EventID, got, want)
		}
	}
	for key, ids := range firstOrder {
		if !slices.IsSorted(ids) {
			t.Errorf("key %s: rows appear in order %v, want id order", key, ids)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func once(outboxRow) int { return 1 }
