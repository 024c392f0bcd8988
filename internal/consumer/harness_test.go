package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testConfig is the consumer configuration tests use: the reader timers
// tuned down (kafkatest's in-process broker accepts session timeouts from
// 100 ms; a real Kafka broker's default minimum is 6 s).
func testConfig(brokers []string, topic, dlt string) Config {
	session := time.Second
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = 6 * time.Second
	}
	return Config{
		Brokers:           brokers,
		Topic:             topic,
		DLTTopic:          dlt,
		GroupID:           "order-projection-" + uuid.NewString(),
		DefaultCurrency:   "RUB",
		MaxWait:           100 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    session,
		RebalanceTimeout:  2 * session,
		BatchSize:         100,
		BatchWait:         5 * time.Millisecond,
		RetryBackoff:      20 * time.Millisecond,
		MaxRetryBackoff:   200 * time.Millisecond,
	}
}

// running is a consumer running against a real broker and a real database.
type running struct {
	c    *Consumer
	stop func() // cancels Run and waits for it
}

// start runs a consumer for cfg over the database at dsn until the test
// ends (or stop is called).
func start(t *testing.T, cfg Config, dsn string, tweak func(*Consumer)) *running {
	t.Helper()
	return startWith(t, cfg, dsn, tweak, nil)
}

// startBench starts a consumer for a benchmark; baseline swaps the use case
// for the one-transaction-per-event listener.
func startBench(b *testing.B, cfg Config, dsn string, baseline bool) *running {
	b.Helper()
	wrap := func(uc *app.ApplyOrderEvents) Applier { return uc }
	if baseline {
		wrap = func(uc *app.ApplyOrderEvents) Applier { return perMessageBaseline{uc} }
	}
	return startWith(b, cfg, dsn, nil, wrap)
}

func startWith(t testing.TB, cfg Config, dsn string, tweak func(*Consumer), wrap func(*app.ApplyOrderEvents) Applier) *running {
	t.Helper()
	db, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	var uc Applier = app.NewApplyOrderEvents(repository.NewTransactor(db), cfg.GroupID)
	if wrap != nil {
		uc = wrap(uc.(*app.ApplyOrderEvents))
	}
	c, err := New(cfg, uc, prometheus.NewRegistry(), logger)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("consumer did not stop within 30s")
			}
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		})
	}
	t.Cleanup(stop)
	return &running{c: c, stop: stop}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) int {
	t.Helper()
	return int(counterValue(c))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func (r *running) applied(t *testing.T) int    { return counter(t, r.c.metrics.applied) }
func (r *running) duplicates(t *testing.T) int { return counter(t, r.c.metrics.duplicates) }
func (r *running) superseded(t *testing.T) int { return counter(t, r.c.metrics.superseded) }
func (r *running) deadLettered(t *testing.T, reason string) int {
	return counter(t, r.c.metrics.deadLettered.WithLabelValues(reason))
}

// eventually polls cond until it holds, failing t after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// event is an OrderCreated.v1 as producers send it.
type event struct {
	EventID    string `json:"eventId"`
	SagaID     string `json:"sagaId,omitempty"`
	EventType  string `json:"eventType"`
	OrderID    int64  `json:"orderId"`
	CustomerID int64  `json:"customerId"`
	// Amount is raw JSON: a number (100.50) or a string ("100.50").
	Amount     json.RawMessage `json:"amount"`
	Currency   string          `json:"currency,omitempty"`
	OccurredAt string          `json:"occurredAt"`
}

func newEvent(order int64, amount string, at time.Time) event {
	return event{
		EventID:    uuid.Must(uuid.NewV7()).String(),
		SagaID:     uuid.NewString(),
		EventType:  EventTypeOrderCreated,
		OrderID:    order,
		CustomerID: 42,
		Amount:     json.RawMessage(amount),
		Currency:   "RUB",
		OccurredAt: at.UTC().Format(time.RFC3339Nano),
	}
}

func (e event) message() idempotent.Message {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return idempotent.Message{Key: []byte(strconv.FormatInt(e.OrderID, 10)), Value: b}
}

// publish writes msgs to topic with the service's idempotent producer and
// returns once all are acknowledged. Records with the same key go to the
// same partition, in the order given.
//
// Each record the decoder takes (by a clock that no date is ahead of) must
// be a valid OrderCreated.v1 of the AsyncAPI contract: the tests' events
// are what the contract promises producers may send. The poison records
// the decoder refuses are not checked here; TestDecode and
// FuzzContractAcceptsOnlyWhatTheDecoderAccepts hold the contract to
// refusing them.
func publish(t *testing.T, brokers []string, topic string, msgs ...idempotent.Message) {
	t.Helper()
	for _, m := range msgs {
		if _, err := clocklessDecoder.decode(m.Value); err == nil {
			asyncapitest.Validate(t, "order.events", m.Key, asyncapitest.IdempotentHeaders(m.Headers), m.Value)
		}
	}
	p, err := idempotent.New(idempotent.Config{Brokers: brokers, Topic: topic, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

func events(evs ...event) []idempotent.Message {
	out := make([]idempotent.Message, len(evs))
	for i, e := range evs {
		out[i] = e.message()
	}
	return out
}

// db opens a pool on dsn for the test's own queries.
func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func amountOf(t *testing.T, pool *pgxpool.Pool, order int64) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT amount::text FROM order_projection WHERE order_id = $1`, order).Scan(&s); err != nil {
		t.Fatalf("order %d: %v", order, err)
	}
	return s
}

// committedOffset is the group's committed offset of a partition (-1: none).
func committedOffset(t *testing.T, brokers []string, group, topic string, partition int) int64 {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	res, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{
		GroupID: group, Topics: map[string][]int{topic: {partition}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Topics[topic] {
		if p.Partition == partition {
			return p.CommittedOffset
		}
	}
	return -1
}

// killableDialer dials broker connections that can all be cut at once, as
// if the process holding them had been killed: the broker sees the
// connections drop and no heartbeat ever again.
type killableDialer struct {
	mu     sync.Mutex
	killed bool
	conns  []net.Conn
}

func (k *killableDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.killed {
		return nil, errors.New("killed")
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
	if err == nil {
		k.conns = append(k.conns, c)
	}
	return c, err
}

func (k *killableDialer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for _, c := range k.conns {
		_ = c.Close()
	}
}

// pgProxy forwards TCP connections to the test database, so a test can take
// the database away from the consumer (a network outage: every connection
// dropped, new ones refused) and bring it back, while the test's own pool
// keeps a direct connection.
type pgProxy struct {
	ln      net.Listener
	target  func() (net.Conn, error)
	mu      sync.Mutex
	down    bool
	conns   []net.Conn
	proxied string // DSN through the proxy
}

func newPGProxy(t *testing.T, dsn string) *pgProxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	var target func() (net.Conn, error)
	if host := q.Get("host"); len(host) > 0 && host[0] == '/' {
		port := q.Get("port")
		if port == "" {
			port = "5432"
		}
		sock := host + "/.s.PGSQL." + port
		target = func() (net.Conn, error) { return net.Dial("unix", sock) }
	} else {
		addr := u.Host
		target = func() (net.Conn, error) { return net.Dial("tcp", addr) }
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	q.Del("host")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = ln.Addr().String()
	p := &pgProxy{ln: ln, target: target, proxied: u.String()}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	return p
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if !down {
			p.conns = append(p.conns, c)
		}
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		go func() {
			up, err := p.target()
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			_, _ = io.Copy(c, up)
			c.Close()
		}()
	}
}

// setDown takes the database away (true: drop every connection, refuse new
// ones) or brings it back.
func (p *pgProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// kafkaDialer is a kafka-go Dialer whose connections k can cut.
func kafkaDialer(k *killableDialer) *kafka.Dialer {
	return &kafka.Dialer{Timeout: 5 * time.Second, DialFunc: k.dial}
}
