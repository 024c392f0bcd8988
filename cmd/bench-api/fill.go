package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The prefill (-prefill) and the purge's expired rows (-purge-rows): rows
// of the shapes the service writes, made by the database in one statement
// per table (generate_series), a million rows in seconds rather than a
// million round trips.
//
//   - payment: 50 clients, one order each (order ids from fillFirstOrder,
//     past any the benchmark charges), one in 33 DECLINED, the rest
//     SUCCEEDED; provider, amount and currency copied from a payment the
//     service wrote.
//   - idempotency_record: one COMPLETED record per payment, its key a
//     random UUID (what clients send), its command hash, response and
//     status copied from a record the service wrote, so the row is as wide.
//   - outbox_event: one published event per payment, its event id
//     time-ordered like the service's UUID v7, its payload copied from an
//     event the service wrote.
//   - processed_event: one row per event, the consumer's name.
//
// Times are spread evenly over each table's retention window under the
// defaults (IDEMPOTENCY_TTL 72h, OUTBOX_RETENTION 24h,
// PROCESSED_EVENT_RETENTION 168h), from now to an hour before the window
// ends; or, for the purge, over the day that ended an hour before the
// window began, so that every such row is expired. payment has no retention: its rows take the records' times.

// fillFirstOrder is the first order id of the filled payments.
const fillFirstOrder = 1_000_000_000

// retentionWindows are the default retentions of the tables the purge
// trims (internal/config/retention.go).
var retentionWindows = map[string]time.Duration{
	"idempotency_record": 72 * time.Hour,
	"outbox_event":       24 * time.Hour,
	"processed_event":    168 * time.Hour,
}

// fillStatements fill n rows per table from the order after @base.
// @idem_from/@idem_span place the records' (and payments') times, likewise
// @outbox_* and @processed_*: a row's age is from + span * (n - g) / n, so
// rows are written oldest first, as the service writes them: a B-tree on
// a time-ordered key filled newest first leaves its pages half full.
var fillStatements = []string{`
INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status, created_at, updated_at)
SELECT 'client-' || g % 50, @base + g, 1 + g % 100000, t.payment_provider, 'pi_fill_' || (@base + g), t.amount, t.currency,
       CASE WHEN g % 33 = 0 THEN 'DECLINED' ELSE 'SUCCEEDED' END, a.at, a.at
  FROM (SELECT * FROM payment WHERE status = 'SUCCEEDED' LIMIT 1) t,
       generate_series(1, @n::bigint) g,
       LATERAL (SELECT now() - @idem_from::interval - @idem_span::interval * ((@n::bigint - g)::float8 / @n::bigint)) a(at)`, `
INSERT INTO idempotency_record (client_id, idempotency_key, command, command_hash, status, response, http_status, payment_id, recovery_point, created_at, updated_at)
SELECT p.client_id, gen_random_uuid()::text, 'charge', t.command_hash, 'COMPLETED', t.response, t.http_status, p.id, p.id, p.created_at, p.created_at
  FROM (SELECT * FROM idempotency_record WHERE status = 'COMPLETED' LIMIT 1) t,
       payment p
 WHERE p.order_id > @base::bigint AND p.order_id <= @base::bigint + @n::bigint`, `
INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, trace_context, created_at, published_at)
SELECT (lpad(to_hex((extract(epoch FROM a.at) * 1000)::bigint), 12, '0') || substr(md5('o' || (@base + g)), 1, 20))::uuid,
       t.topic, (@base + g)::text, t.event_type, t.payload, t.trace_context, a.at - interval '20 milliseconds', a.at
  FROM (SELECT * FROM outbox_event LIMIT 1) t,
       generate_series(1, @n::bigint) g,
       LATERAL (SELECT now() - @outbox_from::interval - @outbox_span::interval * ((@n::bigint - g)::float8 / @n::bigint)) a(at)`, `
INSERT INTO processed_event (event_id, consumer_name, processed_at)
SELECT (lpad(to_hex((extract(epoch FROM a.at) * 1000)::bigint), 12, '0') || substr(md5('p' || (@base + g)), 1, 20))::uuid,
       'order-projection', a.at
  FROM generate_series(1, @n::bigint) g,
       LATERAL (SELECT now() - @processed_from::interval - @processed_span::interval * ((@n::bigint - g)::float8 / @n::bigint)) a(at)`,
}

// fill adds n rows to each growing table: within the retention windows
// (expired false), or a day's worth past them (expired true).
func fill(ctx context.Context, dsn string, n int64, expired bool) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var base int64
	if err := conn.QueryRow(ctx, `SELECT greatest($1::bigint, coalesce(max(order_id), 0)) FROM payment`, fillFirstOrder).Scan(&base); err != nil {
		return err
	}
	args := pgx.NamedArgs{"base": base, "n": n}
	for table, prefix := range map[string]string{"idempotency_record": "idem", "outbox_event": "outbox", "processed_event": "processed"} {
		// An hour's margin on either side of the window's end, so that a
		// run of an hour neither ages a kept row out nor purges less.
		from, span := time.Duration(0), retentionWindows[table]-time.Hour
		if expired {
			from, span = retentionWindows[table]+time.Hour, 24*time.Hour
		}
		args[prefix+"_from"], args[prefix+"_span"] = from, span
	}
	for _, stmt := range fillStatements {
		if _, err := conn.Exec(ctx, stmt, args); err != nil {
			return err
		}
	}
	return nil
}
