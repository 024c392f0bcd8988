package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/example/payment-service/internal/kafkatest"
)

// The saga mode (-saga): charges sent as ChargeOrder.v1 commands on the
// commands topic and measured until each one's reply is on the replies
// topic, in the same passes as the HTTP creates at the same concurrency,
// on the same service. With a broker the service also runs its outbox
// relay and both consumers, so its HTTP creates are measured with them
// too: the ratio compares the two ways in, not a service with Kafka
// against one without.

// Partitions of the saga's topics: as many as the service's tests use.
const (
	sagaCommandPartitions = 3
	sagaReplyPartitions   = 3
	// sagaReplyTimeout is how long one step's reply is waited for before
	// the step counts as an error.
	sagaReplyTimeout = 30 * time.Second
	sagaStepCharged  = "PaymentStepCharged.v1"
)

// sagaBroker is the broker the saga mode runs on: an in-process kfake
// cluster (as the service's tests use by default), or the cluster
// KAFKA_BROKERS names (a topic name of its own per run then).
type sagaBroker struct {
	cluster  *kfake.Cluster // nil: external
	brokers  []string
	commands string
	replies  string
	env      []string // the service's settings for it
	writer   *kafka.Writer
	readers  []*kafka.Reader

	mu      sync.Mutex
	waiting map[string]chan sagaReply // by sagaId
	stray   int                       // replies nobody waited for
	readErr error
}

// sagaReply is what the load generator reads of a reply.
type sagaReply struct {
	SagaID    string `json:"sagaId"`
	EventType string `json:"eventType"`
	// produced is the record's timestamp (the relay's producer sets it
	// when it sends the batch), received when the reader had it.
	produced, received time.Time
}

// startSagaBroker starts the broker, creates the service's topics and
// starts reading the replies.
func startSagaBroker(ctx context.Context) (*sagaBroker, error) {
	s := &sagaBroker{waiting: map[string]chan sagaReply{}}
	if s.brokers = kafkatest.ExternalBrokers(); len(s.brokers) == 0 {
		c, addrs, err := kafkatest.StartInProcess()
		if err != nil {
			return nil, err
		}
		s.cluster, s.brokers = c, addrs
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := func(name string) string { return "bench." + run + "." + name }
	s.commands, s.replies = topic("payment.commands"), topic("payment.replies")
	topics := []struct {
		env, name  string
		partitions int
	}{
		{"PAYMENT_COMMANDS_TOPIC", s.commands, sagaCommandPartitions},
		{"PAYMENT_COMMANDS_DLT_TOPIC", topic("payment.commands.DLT"), 1},
		{"PAYMENT_REPLIES_TOPIC", s.replies, sagaReplyPartitions},
		{"PAYMENT_EVENTS_TOPIC", topic("payment.events"), 1},
		{"ORDER_EVENTS_TOPIC", topic("order.events"), 1},
		{"ORDER_EVENTS_DLT_TOPIC", topic("order.events.DLT"), 1},
	}
	create, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s.env = []string{"KAFKA_BROKERS=" + strings.Join(s.brokers, ",")}
	for _, t := range topics {
		if err := kafkatest.CreateTopicContext(create, s.brokers, t.name, t.partitions); err != nil {
			s.close()
			return nil, err
		}
		s.env = append(s.env, t.env+"="+t.name)
	}
	if s.cluster != nil {
		// kfake allows short sessions; the default 45 s would only slow
		// the group's first join.
		s.env = append(s.env, "KAFKA_CONSUMER_SESSION_TIMEOUT=6s", "KAFKA_CONSUMER_HEARTBEAT_INTERVAL=1s")
	}
	// One writer for every client: kafka-go batches what they write at
	// once, as an orchestrator's producer would.
	s.writer = &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.commands, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	for p := range sagaReplyPartitions {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: s.brokers, Topic: s.replies, Partition: p,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond, StartOffset: kafka.FirstOffset})
		s.readers = append(s.readers, r)
		go s.read(ctx, r)
	}
	return s, nil
}

// read hands each reply of one partition to the client waiting for it.
func (s *sagaBroker) read(ctx context.Context, r *kafka.Reader) {
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
				s.mu.Lock()
				s.readErr = err
				s.mu.Unlock()
			}
			return
		}
		var rep sagaReply
		if err := json.Unmarshal(m.Value, &rep); err != nil {
			rep = sagaReply{EventType: "unreadable: " + err.Error()}
		}
		rep.produced, rep.received = m.Time, time.Now()
		s.mu.Lock()
		ch, ok := s.waiting[rep.SagaID]
		if ok {
			delete(s.waiting, rep.SagaID)
		} else {
			s.stray++
		}
		s.mu.Unlock()
		if ok {
			ch <- rep
		}
	}
}

func (s *sagaBroker) close() {
	if s.writer != nil {
		_ = s.writer.Close()
	}
	for _, r := range s.readers {
		_ = r.Close()
	}
	if s.cluster != nil {
		s.cluster.Close()
	}
}

// stepTimes are when one step's command was sent and written, and when
// its reply was produced and received.
type stepTimes struct {
	order                             int64
	sent, written, produced, received time.Time
}

// step sends one charge step of a saga of its own for order and waits for
// its reply.
func (s *sagaBroker) step(ctx context.Context, order int64) (stepTimes, error) {
	st := stepTimes{order: order, sent: time.Now()}
	err := s.stepTimed(ctx, order, &st)
	return st, err
}

func (s *sagaBroker) stepTimed(ctx context.Context, order int64, st *stepTimes) error {
	saga := uuid.New().String()
	event := uuid.Must(uuid.NewV7()).String()
	body, err := json.Marshal(map[string]any{
		"eventId": event, "eventType": "ChargeOrder.v1", "sagaId": saga, "stepName": "charge",
		"orderId": order, "customerId": 42, "amount": "10.00", "currency": "RUB", "paymentProvider": "sandbox",
		"externalPaymentId": "saga_" + strconv.FormatInt(order, 10), "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err != nil {
		return err
	}
	ch := make(chan sagaReply, 1)
	s.mu.Lock()
	s.waiting[saga] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.waiting, saga)
		s.mu.Unlock()
	}
	msg := kafka.Message{Key: []byte(saga), Value: body, Headers: []kafka.Header{
		{Key: "eventId", Value: []byte(event)}, {Key: "eventType", Value: []byte("ChargeOrder.v1")}}}
	if err := s.writer.WriteMessages(ctx, msg); err != nil {
		forget()
		return err
	}
	st.written = time.Now()
	select {
	case rep := <-ch:
		st.produced, st.received = rep.produced, rep.received
		if rep.EventType != sagaStepCharged {
			return fmt.Errorf("reply %s, want %s", rep.EventType, sagaStepCharged)
		}
		return nil
	case <-time.After(sagaReplyTimeout):
		forget()
		s.mu.Lock()
		err := s.readErr
		s.mu.Unlock()
		return fmt.Errorf("no reply within %s (reader: %v)", sagaReplyTimeout, err) //nolint:errorlint // the reader's error may be nil: the message shows it, and nothing classifies it
	case <-ctx.Done():
		forget()
		return ctx.Err()
	}
}

// awaitSaga waits until the service answers a step: its consumer group
// has joined and its relay publishes.
func (b *bench) awaitSaga(ctx context.Context) error {
	logf("waiting for the service's first saga reply")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := b.saga.step(ctx, b.nextOrder())
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		logf("no saga reply yet: %v", err)
	}
}

func (b *bench) nextOrder() int64 {
	order := b.orders.Add(1)
	if order > b.lastOrder {
		panic("bench-api: out of orders for the service; options.serviceOrders counts too few")
	}
	return order
}

// sagaLoad is closedLoop for saga steps: clients concurrent sagas, each
// sending its next charge step as soon as the last one's reply arrived;
// the steps started after warmup are measured, with the service's and the
// database's CPU time over the measured part.
func (b *bench) sagaLoad(ctx context.Context, clients int, warmup, d time.Duration) result {
	cpu := b.cpuOver(warmup, d)
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+d)
	tallies := make([]tally, clients)
	times := make([][]stepTimes, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for {
				t0 := time.Now()
				if t0.After(end) || ctx.Err() != nil {
					return
				}
				st, err := b.saga.step(ctx, b.nextOrder())
				took := time.Since(t0)
				if t0.Before(measureFrom) {
					continue
				}
				tallies[c].add(took, err)
				if err == nil {
					times[c] = append(times[c], st)
				}
			}
		})
	}
	wg.Wait()
	var steps []stepTimes
	for c := range clients {
		steps = append(steps, times[c]...)
	}
	r := resultOf(d, tallies)
	(<-cpu).divide(&r)
	if err := b.stepSegments(ctx, clients, steps); err != nil {
		logf("saga C=%d: no segments: %v", clients, err)
	}
	return r
}

// stepSegments logs the medians of where a step's time goes, from the
// load generator's clock and the database's (one machine, one clock): the
// payment row's created_at is the claim's transaction, its updated_at the
// record's.
func (b *bench) stepSegments(ctx context.Context, clients int, steps []stepTimes) error {
	if len(steps) == 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	orders := make([]int64, len(steps))
	for i, st := range steps {
		orders[i] = st.order
	}
	rows, err := conn.Query(ctx, `SELECT order_id, created_at, updated_at FROM payment WHERE order_id = ANY($1)`, orders)
	if err != nil {
		return err
	}
	claimed, recorded := map[int64]time.Time{}, map[int64]time.Time{}
	for rows.Next() {
		var order int64
		var c, u time.Time
		if err := rows.Scan(&order, &c, &u); err != nil {
			return err
		}
		claimed[order], recorded[order] = c, u
	}
	if err := rows.Err(); err != nil {
		return err
	}
	segs := [5][]time.Duration{}
	for _, st := range steps {
		c, ok := claimed[st.order]
		if !ok {
			continue
		}
		u := recorded[st.order]
		for i, d := range []time.Duration{st.written.Sub(st.sent), c.Sub(st.written), u.Sub(c), st.produced.Sub(u), st.received.Sub(st.produced)} {
			segs[i] = append(segs[i], d)
		}
	}
	var parts []string
	for i, label := range []string{"write", "to the claim", "claim to record", "record to reply produced", "reply to the reader"} {
		slices.Sort(segs[i])
		parts = append(parts, fmt.Sprintf("%s %.2f / %.2f", label, ms(percentile(segs[i], 0.5)), ms(percentile(segs[i], 0.99))))
	}
	logf("saga C=%d step segments, p50 / p99 ms: %s", clients, strings.Join(parts, "; "))
	return nil
}

// sagaTable sets each concurrency's saga steps beside the HTTP creates of
// the same passes: medians, and the median of the per-pass ratios.
func sagaTable(o options, runs map[string][]result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Saga steps against HTTP creates on the same service, medians of %d passes, %s each:\n\n", o.passes, o.duration)
	b.WriteString("| binary | C | HTTP create req/s | p50 ms | p99 ms | service CPU µs/req | DB CPU µs/req | saga steps/s | p50 ms | p99 ms | service CPU µs/step | DB CPU µs/step | saga / HTTP (per-pass ratios) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	whos := []string{"service"}
	if o.compareBin != "" {
		whos = append(whos, "compare")
	}
	for _, who := range whos {
		for _, c := range o.createC {
			sagaRow(&b, who, c, runs)
		}
	}
	// A closed-loop client's rate is the inverse of its latency, and a
	// step crosses the broker twice; the transports' capacities compare at
	// each one's best concurrency of the pass.
	for _, who := range whos {
		if ratios := peakRatios(who, o.createC, runs); len(ratios) > 0 {
			fmt.Fprintf(&b, "\n%s: peak saga steps/s over peak HTTP creates/s, each at its best concurrency of the pass: %s\n",
				who, ratioText(ratios))
		}
	}
	return b.String()
}

// peakRatios is, pass by pass, who's most saga steps a second at any of
// the concurrencies cs over its most HTTP creates a second at any of them.
func peakRatios(who string, cs []int, runs map[string][]result) []float64 {
	var ratios []float64
	for i := 0; ; i++ {
		var http, saga float64
		for _, c := range cs {
			h, s := runs[name(who, "create", c)], runs[name(who, "saga", c)]
			if i >= len(h) || i >= len(s) {
				return ratios
			}
			http, saga = max(http, h[i].PerSecond), max(saga, s[i].PerSecond)
		}
		if len(cs) == 0 || http == 0 {
			return ratios
		}
		ratios = append(ratios, saga/http)
	}
}

// ratioText is the median of ratios and each of them: "0.86 (0.88, 0.79, 0.86)".
func ratioText(ratios []float64) string {
	per := make([]string, len(ratios))
	for i, r := range ratios {
		per[i] = fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("%.2f (%s)", medianBy(ratios, func(f float64) float64 { return f }), strings.Join(per, ", "))
}

// sagaRow is one row of sagaTable: who's runs at c.
func sagaRow(b *strings.Builder, who string, c int, runs map[string][]result) {
	httpRuns, sagaRuns := runs[name(who, "create", c)], runs[name(who, "saga", c)]
	h, s := median(httpRuns), median(sagaRuns)
	var ratios []float64
	for i := range min(len(httpRuns), len(sagaRuns)) {
		if httpRuns[i].PerSecond > 0 {
			ratios = append(ratios, sagaRuns[i].PerSecond/httpRuns[i].PerSecond)
		}
	}
	ratio := "-"
	if len(ratios) > 0 {
		ratio = ratioText(ratios)
	}
	fmt.Fprintf(b, "| %s | %d | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f | %.0f | %s |\n", who, c,
		h.PerSecond, ms(h.P50), ms(h.P99), us(h.CPUPerRequest), us(h.DBCPUPerRequest),
		s.PerSecond, ms(s.P50), ms(s.P99), us(s.CPUPerRequest), us(s.DBCPUPerRequest), ratio)
}
