package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payment-service/internal/asyncapitest"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/testdb"
)

// eventJSON is a consumer's view of a PaymentSucceeded.v1 or
// PaymentDeclined.v1 value.
type eventJSON struct {
	EventID           uuid.UUID `json:"eventId"`
	SagaID            *string   `json:"sagaId"`
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

// checkOutboxContract holds every row in the outbox of the database at db
// to api/asyncapi.yaml, as the record the relay publishes of it: the row's
// key and payload, the eventId and eventType headers, and the trace
// context's headers when the row has one. Every test's service runs it at
// the test's end, so each event any test makes the service write (charges,
// refunds, provider reports) is checked, published or not. A test whose
// service never had a database (one that tests failing closed) has no
// outbox to check.
func checkOutboxContract(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.Ping(ctx); err != nil {
		return
	}
	rows, err := db.Query(ctx,
		`SELECT event_id, event_type, message_key, payload::text, coalesce(trace_context::text, '{}') FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Errorf("reading the outbox to check it against api/asyncapi.yaml: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var typ, key, payload, trace string
		if err := rows.Scan(&id, &typ, &key, &payload, &trace); err != nil {
			t.Error(err)
			return
		}
		headers := map[string]string{"eventId": id.String(), "eventType": typ}
		var traceContext map[string]string
		if err := json.Unmarshal([]byte(trace), &traceContext); err != nil {
			t.Errorf("outbox row %s: trace context %s: %v", id, trace, err)
		}
		for _, name := range []string{"traceparent", "tracestate"} {
			if v := traceContext[name]; v != "" {
				headers[name] = v
			}
		}
		channel, err := asyncapitest.ChannelOf(typ)
		if err != nil {
			t.Errorf("outbox row %s: %v", id, err)
			continue
		}
		asyncapitest.Validate(t, channel, []byte(key), headers, []byte(payload))
	}
	if err := rows.Err(); err != nil {
		t.Error(err)
	}
}

type outboxRow struct {
	eventID uuid.UUID
	topic   string
	key     string
	typ     string
	payload eventJSON
	raw     string
}

func (s *testService) outboxRows(t *testing.T) []outboxRow {
	t.Helper()
	rows, err := s.db.Query(context.Background(),
		`SELECT event_id, topic, message_key, event_type, payload::text FROM outbox_event ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.eventID, &r.topic, &r.key, &r.typ, &r.raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(r.raw), &r.payload); err != nil {
			t.Fatalf("payload %s: %v", r.raw, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *testService) setSaga(t *testing.T, order int64, saga uuid.UUID) {
	t.Helper()
	if _, err := s.db.Exec(context.Background(), `UPDATE order_projection SET saga_id = $1 WHERE order_id = $2`, saga, order); err != nil {
		t.Fatal(err)
	}
}

// checkEvent compares an event with the payment the API returned.
func checkEvent(t *testing.T, ev eventJSON, typ string, p paymentJSON, saga *uuid.UUID) {
	t.Helper()
	if ev.EventID.Version() != 7 || ev.EventType != typ || ev.PaymentID != p.ID || ev.OrderID != p.OrderID ||
		ev.CustomerID != p.CustomerID || ev.Amount != p.Amount || ev.Currency != p.Currency ||
		ev.PaymentProvider != p.PaymentProvider || ev.ExternalPaymentID != p.ExternalPaymentID || ev.OccurredAt.IsZero() {
		t.Fatalf("event %+v does not describe %s of payment %+v", ev, typ, p)
	}
	switch {
	case saga == nil && ev.SagaID != nil:
		t.Fatalf("sagaId = %s, want none", *ev.SagaID)
	case saga != nil && (ev.SagaID == nil || *ev.SagaID != saga.String()):
		t.Fatalf("sagaId = %v, want %s", ev.SagaID, saga)
	}
}

// Exactly one outbox event per payment outcome, written with the outcome:
// replays, the second layer, conflicts, concurrent duplicates and
// transient failures add none. Without KAFKA_BROKERS nothing publishes, so
// the rows stay unpublished.
func TestOutboxHoldsOneEventPerPaymentOutcome(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, testdb.New(t), nil, sandboxprovider.Config{Latency: 100 * time.Millisecond})
	saga := uuid.Must(uuid.NewV7())
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.setSaga(t, 1001, saga)
	s.addOrder(t, 1002, 42, "7.00", "EUR")
	s.addOrder(t, 1003, 7, "19.99", "EUR")
	s.addOrder(t, 1004, 7, "500", "JPY")

	charged := s.charge(t, "k-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	if charged.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", charged.status, charged.body)
	}
	steps := []struct {
		key, body string
		status    int
	}{
		{"k-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1"), http.StatusCreated},               // replay
		{"k-2", chargeBody(1001, 42, "100.50", "RUB", "pi_1"), http.StatusOK},                    // second layer
		{"k-3", chargeBody(1002, 42, "7.00", "EUR", "pi_1"), http.StatusConflict},                // external payment conflict
		{"k-1", chargeBody(1002, 42, "7.00", "EUR", "pi_9"), http.StatusConflict},                // key reused
		{"k-4", chargeBody(1002, 42, "7.00", "EUR", "decline_card"), http.StatusPaymentRequired}, // declined
		{"k-4", chargeBody(1002, 42, "7.00", "EUR", "decline_card"), http.StatusPaymentRequired}, // its replay
		{"k-5", chargeBody(1003, 7, "19.99", "EUR", "fail_1"), http.StatusServiceUnavailable},    // nothing stored
	}
	for _, st := range steps {
		if r := s.charge(t, st.key, st.body); r.status != st.status {
			t.Fatalf("%s %s: %d %s, want %d", st.key, st.body, r.status, r.body, st.status)
		}
	}
	// Concurrent duplicates of one command: one outcome, one event.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { s.charge(t, "k-6", chargeBody(1004, 7, "500", "JPY", "pi_6")) })
	}
	wg.Wait()
	if r := s.charge(t, "k-6", chargeBody(1004, 7, "500", "JPY", "pi_6")); r.status != http.StatusCreated {
		t.Fatalf("k-6: %d %s", r.status, r.body)
	}

	// The database: one event per final payment, none for anything else.
	if n := s.count(t, `SELECT count(*) FROM payment WHERE status IN ('SUCCEEDED', 'DECLINED')`); n != 3 {
		t.Fatalf("final payments = %d, want 3", n)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event`); n != 3 {
		t.Fatalf("outbox rows = %d, want 3", n)
	}
	if n := s.count(t, `SELECT count(*) FROM payment p
	                     WHERE (SELECT count(*) FROM outbox_event o WHERE (o.payload->>'paymentId')::bigint = p.id) = 1`); n != 3 {
		t.Fatalf("payments with exactly one event = %d, want 3", n)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NULL AND topic = 'payment.events'`); n != 3 {
		t.Fatalf("unpublished rows on payment.events = %d, want 3", n)
	}

	rows := s.outboxRows(t)
	byOrder := map[int64]outboxRow{}
	for _, r := range rows {
		if r.eventID != r.payload.EventID || r.typ != r.payload.EventType || r.key != strconv.FormatInt(r.payload.OrderID, 10) {
			t.Fatalf("row columns disagree with the payload: %+v", r)
		}
		byOrder[r.payload.OrderID] = r
	}
	checkEvent(t, byOrder[1001].payload, "PaymentSucceeded.v1", decode[paymentJSON](t, charged), &saga)
	if ev := byOrder[1002].payload; ev.EventType != "PaymentDeclined.v1" || ev.ExternalPaymentID != "decline_card" || ev.SagaID != nil {
		t.Fatalf("decline event %+v", ev)
	}
	if strings.Contains(byOrder[1002].raw, "sagaId") {
		t.Fatalf("unknown sagaId must be omitted: %s", byOrder[1002].raw)
	}
	if ev := byOrder[1004].payload; ev.EventType != "PaymentSucceeded.v1" || ev.Amount != "500" || ev.Currency != "JPY" {
		t.Fatalf("event of the concurrent charge %+v", ev)
	}
}

// End to end: POST /payments puts its event on the topic, through the
// outbox and the relay the service starts when KAFKA_BROKERS is set. The
// poll interval is far beyond the test's deadline, so the commit's NOTIFY
// is what wakes the relay.
func TestPaymentEventIsPublishedToTheTopic(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	topic := kafkatest.CreateTopic(t, brokers, 3)
	s := startService(t, map[string]string{
		"KAFKA_BROKERS":        strings.Join(brokers, ","),
		"PAYMENT_EVENTS_TOPIC": topic,
		"OUTBOX_POLL_INTERVAL": "5m",
	})
	saga := uuid.Must(uuid.NewV7())
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.setSaga(t, 1001, saga)
	s.addOrder(t, 1002, 42, "7.00", "EUR")

	charged := s.charge(t, "k-1", chargeBody(1001, 42, "100.50", "RUB", "pi_1"))
	declined := s.charge(t, "k-2", chargeBody(1002, 42, "7.00", "EUR", "decline_1"))
	if charged.status != http.StatusCreated || declined.status != http.StatusPaymentRequired {
		t.Fatalf("charges: %d %s / %d %s", charged.status, charged.body, declined.status, declined.body)
	}

	deadline := time.Now().Add(60 * time.Second)
	for s.count(t, `SELECT count(*) FROM outbox_event WHERE published_at IS NOT NULL`) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("events not marked published within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs := kafkatest.ReadAll(t, brokers, topic, 30*time.Second)
	asyncapitest.ValidateRecords(t, "payment.events", recs)
	if len(recs) != 2 {
		t.Fatalf("topic holds %d records, want 2", len(recs))
	}
	stored := map[uuid.UUID]outboxRow{}
	for _, r := range s.outboxRows(t) {
		stored[r.eventID] = r
	}
	for _, rec := range recs {
		var ev eventJSON
		if err := json.Unmarshal(rec.Value, &ev); err != nil {
			t.Fatal(err)
		}
		headers := map[string]string{}
		for _, h := range rec.Headers {
			headers[h.Key] = string(h.Value)
		}
		row, ok := stored[ev.EventID]
		if !ok || row.raw != string(rec.Value) {
			t.Fatalf("record %s is not the stored outbox payload", rec.Value)
		}
		if headers["eventId"] != ev.EventID.String() || headers["eventType"] != ev.EventType {
			t.Fatalf("headers %v for event %s %s", headers, ev.EventID, ev.EventType)
		}
		if string(rec.Key) != strconv.FormatInt(ev.OrderID, 10) {
			t.Fatalf("key %q for order %d", rec.Key, ev.OrderID)
		}
		switch ev.OrderID {
		case 1001:
			checkEvent(t, ev, "PaymentSucceeded.v1", decode[paymentJSON](t, charged), &saga)
		case 1002:
			p := decode[problemJSON](t, declined).Payment
			if p == nil {
				t.Fatalf("decline without payment: %s", declined.body)
			}
			checkEvent(t, ev, "PaymentDeclined.v1", *p, nil)
		default:
			t.Fatalf("event for order %d", ev.OrderID)
		}
	}
	if got := s.metric(t, `outbox_events_published_total{topic="`+topic+`"}`); got != 2 {
		t.Fatalf("outbox_events_published_total = %v, want 2", got)
	}
	if got := s.metric(t, `outbox_relay_leader{topic="`+topic+`"}`); got != 1 {
		t.Fatalf("outbox_relay_leader = %v, want 1", got)
	}
}

// Each command's phase 3 wakes the relays after its commit (outbox.Waker,
// decision 0027): a relay publishes the event now, not at its poll.
func TestEachCommandsEventWakesTheRelays(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t)
	s := startServiceWith(t, dsn, nil, sandboxprovider.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN outbox_event"); err != nil {
		t.Fatal(err)
	}
	woken := func(what string) {
		t.Helper()
		// Nothing else notifies: without the wake this waits in vain.
		waitCtx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		if _, err := listener.WaitForNotification(waitCtx); err != nil {
			t.Fatalf("no wake after %s: %v", what, err)
		}
	}
	payment := s.paidPayment(t, 8801, "30.00")
	woken("a charge")
	if r := s.refund(t, payment, "refund-wake", refundBody("10.00", "re_wake")); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	woken("a refund")
}
