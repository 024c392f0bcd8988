package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/servicetest"
	"github.com/example/payment-service/internal/testdb"
)

// sagaRig is the service with its saga transport on a real broker (the
// in-process one unless KAFKA_BROKERS names one), a real database and the
// sandbox provider: commands go in on its commands topic, replies are read
// from its replies topic.
type sagaRig struct {
	svc       *servicetest.Service
	brokers   []string
	commands  string
	dlt       string
	replies   string
	orders    string
	writer    *kafka.Writer
	transport *kafka.Transport
	tail      *kafkatest.Tail
	seen      []reply // every reply read so far, in order
}

// reply is a reply as it came off the topic.
type reply struct {
	Key     string
	Headers map[string]string
	Body    map[string]any
	Raw     []byte
}

func (r reply) str(field string) string {
	s, _ := r.Body[field].(string)
	return s
}

// startSaga runs the service with env over the saga's settings.
func startSaga(t *testing.T, env map[string]string, provider sandboxprovider.Config, opts ...service.Option) *sagaRig {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	r := &sagaRig{
		brokers:  brokers,
		commands: kafkatest.CreateTopic(t, brokers, 3),
		dlt:      kafkatest.CreateTopic(t, brokers, 1),
		replies:  kafkatest.CreateTopic(t, brokers, 3),
		orders:   kafkatest.CreateTopic(t, brokers, 1),
	}
	session := "1s"
	if len(kafkatest.ExternalBrokers()) > 0 {
		session = "6s"
	}
	vars := map[string]string{
		"KAFKA_BROKERS":                     strings.Join(brokers, ","),
		"ORDER_EVENTS_TOPIC":                r.orders,
		"ORDER_EVENTS_DLT_TOPIC":            kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_EVENTS_TOPIC":              kafkatest.CreateTopic(t, brokers, 1),
		"PAYMENT_COMMANDS_TOPIC":            r.commands,
		"PAYMENT_COMMANDS_DLT_TOPIC":        r.dlt,
		"PAYMENT_REPLIES_TOPIC":             r.replies,
		"KAFKA_CONSUMER_MAX_WAIT":           "100ms",
		"KAFKA_CONSUMER_HEARTBEAT_INTERVAL": "100ms",
		"KAFKA_CONSUMER_SESSION_TIMEOUT":    session,
		"KAFKA_CONSUMER_RETRY_BACKOFF":      "20ms",
		"KAFKA_CONSUMER_MAX_RETRY_BACKOFF":  "200ms",
		"OUTBOX_POLL_INTERVAL":              "200ms",
		"CHARGE_COMPLETER_CRON":             "* * * * * *",
		"CHARGE_COMPLETER_GRACE":            "0s",
		"API_KEYS":                          servicetest.BaseEnv["API_KEYS"] + ",saga:saga-secret",
	}
	for k, v := range env {
		vars[k] = v
	}
	r.svc = servicetest.Start(t, servicetest.Options{DSN: testdb.New(t), Env: vars, Provider: provider, Service: opts})
	// The rig's writers share a transport of their own: kafka-go's default
	// one is the process's, and its cached metadata, read before this
	// test's topics were created, would answer that they do not exist (a
	// real broker; kfake is not asked again either way).
	r.transport = &kafka.Transport{}
	t.Cleanup(r.transport.CloseIdleConnections)
	r.writer = &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: r.commands, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, Transport: r.transport}
	t.Cleanup(func() { _ = r.writer.Close() })
	r.tail = kafkatest.NewTail(brokers, r.replies)
	return r
}

var orderIDs atomic.Int64

// newOrder projects an order (customer 42, amount RUB) through the order
// events topic and waits until the projection holds it.
func (r *sagaRig) newOrder(t *testing.T, amount string) int64 {
	t.Helper()
	id := 700000 + orderIDs.Add(1)
	r.projectOrder(t, id, amount)
	r.waitFor(t, "order projected", func() bool {
		return r.svc.Count(t, `SELECT count(*) FROM order_projection WHERE order_id = $1`, id) == 1
	})
	return id
}

// projectOrder publishes the order's OrderCreated.v1.
func (r *sagaRig) projectOrder(t *testing.T, id int64, amount string) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(r.brokers...), Topic: r.orders, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: r.transport}
	defer func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}()
	body := fmt.Sprintf(`{"eventId":%q,"eventType":"OrderCreated.v1","orderId":%d,"customerId":42,"amount":%q,"currency":"RUB","occurredAt":%q}`,
		uuid.Must(uuid.NewV7()), id, amount, time.Now().UTC().Format(time.RFC3339Nano))
	if err := w.WriteMessages(context.Background(), kafka.Message{Key: []byte(fmt.Sprint(id)), Value: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

// chargeCmd is a ChargeOrder.v1 for order; the step's content is order,
// customer 42, amount RUB and external.
func chargeCmd(saga uuid.UUID, step string, order int64, amount, external string) map[string]any {
	return map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "ChargeOrder.v1", "sagaId": saga.String(), "stepName": step,
		"orderId": order, "customerId": 42, "amount": amount, "currency": "RUB", "paymentProvider": "sandbox",
		"externalPaymentId": external, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// compensateCmd is a CompensateCharge.v1 of step compensates.
func compensateCmd(saga uuid.UUID, step, compensates string) map[string]any {
	return map[string]any{
		"eventId": uuid.Must(uuid.NewV7()).String(), "eventType": "CompensateCharge.v1", "sagaId": saga.String(),
		"stepName": step, "compensates": compensates, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano),
	}
}

// resent is cmd re-sent by the orchestrator: a new eventId and occurredAt.
func resent(cmd map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range cmd {
		out[k] = v
	}
	out["eventId"] = uuid.Must(uuid.NewV7()).String()
	out["occurredAt"] = time.Now().UTC().Format(time.RFC3339Nano)
	return out
}

// withHeader is cmd's record with one more header.
func (r *sagaRig) withHeader(t *testing.T, cmd map[string]any, key, value string) kafka.Message {
	t.Helper()
	m := r.messages(t, []map[string]any{cmd})[0]
	m.Headers = append(m.Headers, kafka.Header{Key: key, Value: []byte(value)})
	asyncapitest.Validate(t, "paymentCommands", m.Key, asyncapitest.KafkaHeaders(m.Headers), m.Value)
	return m
}

// send publishes commands, each keyed by its sagaId, with eventId and
// eventType as headers too; each must be a valid message of the contract
// (api/asyncapi.yaml).
func (r *sagaRig) send(t *testing.T, cmds ...map[string]any) {
	t.Helper()
	for _, m := range r.messages(t, cmds) {
		asyncapitest.Validate(t, "paymentCommands", m.Key, asyncapitest.KafkaHeaders(m.Headers), m.Value)
	}
	r.sendRaw(t, r.messages(t, cmds)...)
}

// sendInvalid publishes commands the contract refuses, as send does.
func (r *sagaRig) sendInvalid(t *testing.T, cmds ...map[string]any) {
	t.Helper()
	for _, m := range r.messages(t, cmds) {
		if err := asyncapitest.Check("paymentCommands", m.Key, asyncapitest.KafkaHeaders(m.Headers), m.Value); err == nil {
			t.Fatalf("a command meant to be invalid is valid: %s", m.Value)
		}
	}
	r.sendRaw(t, r.messages(t, cmds)...)
}

// messages are the records of cmds.
func (r *sagaRig) messages(t *testing.T, cmds []map[string]any) []kafka.Message {
	t.Helper()
	msgs := make([]kafka.Message, len(cmds))
	for i, c := range cmds {
		body, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := c["sagaId"].(string)
		id, _ := c["eventId"].(string)
		typ, _ := c["eventType"].(string)
		msgs[i] = kafka.Message{Key: []byte(key), Value: body,
			Headers: []kafka.Header{{Key: "eventId", Value: []byte(id)}, {Key: "eventType", Value: []byte(typ)}}}
	}
	return msgs
}

// sendRaw publishes records as they are.
func (r *sagaRig) sendRaw(t *testing.T, msgs ...kafka.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.writer.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// read takes the replies published since the last read into seen.
func (r *sagaRig) read(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := r.tail.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	asyncapitest.ValidateRecords(t, "paymentReplies", recs)
	for _, rec := range recs {
		rep := reply{Key: string(rec.Key), Headers: map[string]string{}, Raw: rec.Value}
		for _, h := range rec.Headers {
			rep.Headers[h.Key] = string(h.Value)
		}
		if err := json.Unmarshal(rec.Value, &rep.Body); err != nil {
			t.Fatalf("a reply that is not JSON: %s", rec.Value)
		}
		r.seen = append(r.seen, rep)
	}
}

// repliesTo is every reply seen for the step.
func (r *sagaRig) repliesTo(saga uuid.UUID, step string) []reply {
	var out []reply
	for _, rep := range r.seen {
		if rep.str("sagaId") == saga.String() && rep.str("stepName") == step {
			out = append(out, rep)
		}
	}
	return out
}

// awaitReply waits (up to 30s) for n replies to the step and returns them.
func (r *sagaRig) awaitReply(t *testing.T, saga uuid.UUID, step string, n int) []reply {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.read(t)
		got := r.repliesTo(saga, step)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga %s step %s: %d replies within 30s, want %d; all replies: %s", saga, step, len(got), n, r.dump())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// quietFor reads replies for d and fails if the step gets more than n.
func (r *sagaRig) quietFor(t *testing.T, d time.Duration, saga uuid.UUID, step string, n int) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		r.read(t)
	}
	if got := r.repliesTo(saga, step); len(got) > n {
		t.Fatalf("saga %s step %s: %d replies, want %d: %s", saga, step, len(got), n, r.dump())
	}
}

func (r *sagaRig) dump() string {
	var b strings.Builder
	for _, rep := range r.seen {
		b.Write(rep.Raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// waitFor polls cond for up to 30s.
func (r *sagaRig) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
	}
}

// net is what the provider holds for a reference: charged less refunded.
func (r *sagaRig) net(reference string) decimal.Decimal {
	total := decimal.Zero
	for _, c := range r.svc.Provider.ChargesFor(reference) {
		if c.Status == sandboxprovider.StatusSucceeded {
			total = total.Add(c.Amount)
		}
	}
	for _, rf := range r.svc.Provider.RefundsFor(reference) {
		if rf.Status == sandboxprovider.StatusSucceeded {
			total = total.Sub(rf.Amount)
		}
	}
	return total
}

// succeededCharges counts the provider's charges of a reference.
func (r *sagaRig) succeededCharges(reference string) int {
	n := 0
	for _, c := range r.svc.Provider.ChargesFor(reference) {
		if c.Status == sandboxprovider.StatusSucceeded {
			n++
		}
	}
	return n
}

// eventIDs are the distinct eventIds of replies.
func eventIDs(replies []reply) map[string]bool {
	out := map[string]bool{}
	for _, r := range replies {
		out[r.str("eventId")] = true
	}
	return out
}

// postJSON posts body with an API key and an Idempotency-Key.
func postJSON(t *testing.T, url, apiKey, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// retried is how often the service has retried charging a saga step
// (saga_commands_retries_total{step="charging"} on /metrics): above 0
// once a step waits for its order.
func (r *sagaRig) retried(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get(r.svc.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, `saga_commands_retries_total{step="charging"} `); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no saga_commands_retries_total{step=\"charging\"} on /metrics")
	return 0
}

// committed is the saga consumer group's committed offset of a partition
// of the commands topic (-1: none): the next record it would start from.
func (r *sagaRig) committed(t *testing.T, partition int) int64 {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(r.brokers...), Timeout: 10 * time.Second}
	res, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{
		GroupID: r.svc.Env["PAYMENT_COMMANDS_GROUP"], Topics: map[string][]int{r.commands: {partition}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Topics[r.commands] {
		if p.Partition == partition {
			return p.CommittedOffset
		}
	}
	return -1
}
