package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/telemetry"
)

// DefaultPaymentEventsTopic is where payment events go unless configured.
const DefaultPaymentEventsTopic = "payment.events"

// DefaultPaymentRepliesTopic is where saga steps' replies go unless
// configured.
const DefaultPaymentRepliesTopic = "payment.replies"

// OutboxConfig says where outbox rows are addressed, and whom to tell once
// they are committed.
type OutboxConfig struct {
	// PaymentEventsTopic is the Kafka topic of PaymentSucceeded.v1,
	// PaymentDeclined.v1 and PaymentFailed.v1.
	PaymentEventsTopic string
	// RepliesTopic is the Kafka topic of the saga steps' replies
	// (app.SagaReply).
	RepliesTopic string
	// Waker, if set, is woken after each commit that wrote outbox rows,
	// so that a relay publishes them now rather than at its next poll
	// (outbox.Waker).
	Waker OutboxWaker

	// wroteInTx is set inside Transactor.Transact: a store's write there
	// marks it, and the transaction wakes the Waker after its commit.
	// Woken before, a relay could read before the rows are visible and
	// then wait for its poll.
	wroteInTx *bool
}

// OutboxWaker is told that outbox rows were committed (outbox.Waker).
type OutboxWaker interface {
	// Wake asks for the relays to be woken soon; it must not block.
	Wake()
}

// wrote is called by a store once its outbox rows are written.
func (c OutboxConfig) wrote() {
	switch {
	case c.wroteInTx != nil:
		*c.wroteInTx = true
	case c.Waker != nil:
		c.Waker.Wake()
	}
}

// outboxEventRow is the row of outbox_event (db/migrations/00004_outbox.sql)
// a statement writes (the clause announced), published by internal/outbox.
type outboxEventRow struct {
	EventID    uuid.UUID
	Topic      string
	MessageKey string
	EventType  string
	Payload    string // json column: the exact bytes the relay publishes

	// TraceContext (json, NULL when not traced) is the recording span's W3C
	// trace context; the relay sends it as record headers.
	TraceContext *string
}

// addTo sets the parameters of the clause announced (an outbox row) in
// values.
func (ev outboxEventRow) addTo(values map[string]any) {
	values["event_id"] = ev.EventID
	values["topic"] = ev.Topic
	values["message_key"] = ev.MessageKey
	values["event_type"] = ev.EventType
	values["payload"] = ev.Payload
	values["trace_context"] = ptrString(ev.TraceContext)
}

// sagaIDField is an event's optional sagaId: omitted when the order came
// without one.
func sagaIDField(saga uuid.NullUUID) *string {
	if !saga.Valid {
		return nil
	}
	s := saga.UUID.String()
	return &s
}

// newOutboxRow renders an event's payload v as its outbox row: the payload
// is the exact message value the relay publishes, keyed by the order id
// (one order's events land on one partition, in order), with the trace
// context of the span writing it under ctx, if any.
func newOutboxRow(ctx context.Context, cfg OutboxConfig, id uuid.UUID, typ string, order int64, v any) (outboxEventRow, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return outboxEventRow{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	traceContext, err := traceContextJSON(ctx)
	if err != nil {
		return outboxEventRow{}, err
	}
	return outboxEventRow{
		EventID:      id,
		Topic:        cfg.PaymentEventsTopic,
		MessageKey:   strconv.FormatInt(order, 10),
		EventType:    typ,
		Payload:      string(payload),
		TraceContext: traceContext,
	}, nil
}

// traceContextJSON is the trace_context column's value for a row written
// under ctx: its span's W3C fields as a JSON object, nil when ctx is not
// traced (tracing off costs one context lookup here).
func traceContextJSON(ctx context.Context) (*string, error) {
	fields := telemetry.TraceContext(ctx)
	if fields == nil {
		return nil, nil
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode the trace context: %w", err)
	}
	s := string(b)
	return &s, nil
}

// ptrString is s's value, or "" for nil.
func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// OutboxRelayStore implements outbox.Store on PostgreSQL, for every row of
// the outbox whatever its topic.
//
// Leadership is a session-level advisory lock held on a dedicated
// connection, outside the pool: it lives exactly as long as that session,
// so PostgreSQL itself releases it when the leader's process or network
// dies. The same connection LISTENs for the outbox trigger's NOTIFY and
// runs every read and write of the term, so a leader whose session is gone
// cannot touch the table.
type OutboxRelayStore struct {
	dsn     string
	lockKey int64
	// askEvery is how often a standby asks for the relay lock, and so how
	// long at most the relay stands still after its leader's session ends.
	askEvery time.Duration
}

// NewOutboxRelayStore returns the relay's store, connecting to dsn.
func NewOutboxRelayStore(dsn string) *OutboxRelayStore {
	return &OutboxRelayStore{dsn: dsn, lockKey: relayLockKey(), askEvery: 500 * time.Millisecond}
}

// relayLockKey is the advisory lock key of the one relay of this database.
// It does not depend on the topic: every relay publishes every row, to the
// row's own topic, so two relays configured with different topics (a
// rolling rename) must still exclude each other. The bigint key space is
// shared with goose's migration lock (a fixed constant), which a 64-bit hash
// of our own name does not meet.
func relayLockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("payment-service/outbox-relay"))
	return int64(h.Sum64())
}

// notifyChannel is the channel the relay LISTENs on and writers' wakes
// are sent to, after the writers' commits (decision 0027).
const notifyChannel = "outbox_event"

// notifyOutboxSQL is one wake (outbox.Waker). A transaction that notifies
// holds PostgreSQL's one notify lock until its commit ends, so this one
// commits without waiting for its WAL flush: the lock is held for
// microseconds, and a wake lost in a crash costs the relay's poll, never
// an event.
const notifyOutboxSQL = `SELECT set_config('synchronous_commit', 'off', true), pg_notify('` + notifyChannel + `', '')`

var notifyOutboxStmt = compileNamed(notifyOutboxSQL)

// OutboxNotifier returns the notify of the service's outbox.Waker: one
// statement on the pool, waiting its turn at gate.
func OutboxNotifier(db *gorm.DB, gate *Gate) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := gate.enter(ctx); err != nil {
			return err
		}
		defer gate.leave()
		_, err := exec(ctx, db, notifyOutboxStmt, nil)
		return mapError(err)
	}
}

// sessionSettings make the leader's session safe to hold for hours:
// timeouts a server or role may set must not end it (an idle leader is an
// idle session), and the server's TCP keepalives drop the session of a
// leader that vanished without closing it, within about 25 s, so a standby
// takes over.
var sessionSettings = [][2]string{
	{"statement_timeout", "0"},
	{"lock_timeout", "0"},
	{"idle_session_timeout", "0"},
	{"tcp_keepalives_idle", "10"},
	{"tcp_keepalives_interval", "5"},
	{"tcp_keepalives_count", "3"},
}

// Lead implements outbox.Store: it connects, then asks for the relay lock
// every askEvery until it is the leader, and only then LISTENs.
//
// A standby asks with pg_try_advisory_lock, one short statement at a time,
// rather than waiting in pg_advisory_lock. A waiting statement holds its
// snapshot for as long as the leader lives, and CREATE INDEX CONCURRENTLY
// waits for every older snapshot: beside two replicas, an index built by a
// migration or by hand never finished (docs/deploying.md). A waiting
// standby that had LISTENed would also hold back the server's notification
// queue for as long, since a backend inside a statement reads none.
func (s *OutboxRelayStore) Lead(ctx context.Context) (outbox.Session, error) {
	// Only the asking below may last long; connecting and setting up the
	// session must not hang on an unreachable server.
	setupCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(setupCtx, s.dsn)
	if err != nil {
		return nil, mapError(fmt.Errorf("outbox relay: connect: %w", err))
	}
	fail := func(what string, err error) (outbox.Session, error) {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
		return nil, mapError(fmt.Errorf("outbox relay: %s: %w", what, err))
	}
	for _, kv := range sessionSettings {
		if _, err := conn.Exec(setupCtx, "SELECT set_config($1, $2, false)", kv[0], kv[1]); err != nil {
			return fail("set "+kv[0], err)
		}
	}
	ask := time.NewTicker(s.askEvery)
	defer ask.Stop()
	for {
		var leader bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", s.lockKey).Scan(&leader); err != nil {
			return fail("ask for the relay lock", err)
		}
		if leader {
			break
		}
		select {
		case <-ctx.Done():
			return fail("ask for the relay lock", ctx.Err())
		case <-ask.C:
		}
	}
	// LISTEN before the first read of the outbox: a commit after this is
	// either seen by that read or notified, and one before it is seen.
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return fail("listen", err)
	}
	return &outboxSession{conn: conn}, nil
}

type outboxSession struct {
	conn *pgx.Conn
}

// pendingSQL reads the oldest unpublished rows of every topic: a row is
// published to the topic it was written for, so a changed
// PAYMENT_EVENTS_TOPIC strands nothing. The partial index
// ix_outbox_event_unpublished serves it.
const pendingSQL = `
SELECT id, event_id, topic, event_type, message_key, payload::text,
       (extract(epoch FROM clock_timestamp() - created_at) * 1000000)::bigint,
       trace_context::text
  FROM outbox_event
 WHERE published_at IS NULL
 ORDER BY id
 LIMIT $1`

func (s *outboxSession) Pending(ctx context.Context, limit int) ([]outbox.Event, error) {
	rows, err := s.conn.Query(ctx, pendingSQL, limit)
	if err != nil {
		return nil, mapError(err)
	}
	defer rows.Close()
	var events []outbox.Event
	for rows.Next() {
		var (
			e       outbox.Event
			eventID uuid.UUID
			key     string
			payload string
			ageUS   int64
			traced  *string
		)
		if err := rows.Scan(&e.ID, &eventID, &e.Topic, &e.EventType, &key, &payload, &ageUS, &traced); err != nil {
			return nil, mapError(err)
		}
		if traced != nil {
			// Written by traceContextJSON; an unreadable value only costs
			// the trace, never the event.
			_ = json.Unmarshal([]byte(*traced), &e.TraceContext)
		}
		e.EventID, e.Key, e.Payload = eventID, []byte(key), []byte(payload)
		e.Age = time.Duration(max(ageUS, 0)) * time.Microsecond
		events = append(events, e)
	}
	return events, mapError(rows.Err())
}

func (s *outboxSession) MarkPublished(ctx context.Context, ids []int64) error {
	_, err := s.conn.Exec(ctx,
		`UPDATE outbox_event SET published_at = now() WHERE id = ANY($1) AND published_at IS NULL`, ids)
	return mapError(err)
}

// Wait implements outbox.Session. Notifications that arrived while the
// session was busy are buffered by pgx and returned at once.
func (s *outboxSession) Wait(ctx context.Context) error {
	_, err := s.conn.WaitForNotification(ctx)
	return err
}

// Close implements outbox.Session: ending the session releases the lock.
func (s *outboxSession) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.conn.Close(ctx)
}

var _ outbox.Store = (*OutboxRelayStore)(nil)
