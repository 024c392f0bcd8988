package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// fillDatabase is a new migrated database and a connection to it, both
// gone when t ends, and a context that ends after two minutes.
func fillDatabase(t *testing.T) (context.Context, string, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dsn := testdb.New(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, dsn, conn
}

// The prefill's rows are within retention and the purge cycles' rows past
// it, as the service's own purge (`payment-service cleanup`, default
// settings) judges them: it keeps every prefilled row and deletes every
// expired one, payments excepted (they have no retention). Otherwise the
// purge under load would measure another amount of work than it reports.
func TestFilledRowsAreKeptAndExpiredOnesPurged(t *testing.T) {
	ctx, dsn, conn := fillDatabase(t)
	// One charge's rows, as the service writes them: fill copies their
	// shapes.
	for _, q := range []string{
		`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			VALUES ('bench', 1, 42, 'sandbox', 'pi_1', 10, 'RUB', 'SUCCEEDED')`,
		`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, payment_id)
			SELECT 'bench', 'k1', 'h', 'COMPLETED', '{"id":1}', 201, id FROM payment`,
		`INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, published_at)
			VALUES (gen_random_uuid(), 'payment.events', '1', 'PaymentSucceeded.v1', '{"paymentId":1}', now())`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const kept, expired = 300, 200
	if err := fill(ctx, dsn, kept, false); err != nil {
		t.Fatal(err)
	}
	if err := fill(ctx, dsn, expired, true); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": dsn, "API_KEYS": "bench:secret", "SANDBOX_PROVIDER_URL": "http://127.0.0.1:1"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := service.Cleanup(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]int64{
		"payment":            1 + kept + expired,
		"idempotency_record": 1 + kept,
		"outbox_event":       1 + kept,
		"processed_event":    kept,
	} {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d rows after the purge, want %d", table, n, want)
		}
	}
}

// The -scale table's figures are each the median of its own, and the HOT
// counters belong to one run, the one with the median requests/s.
func TestMedianScaleTakesEachFiguresMedian(t *testing.T) {
	run := func(rate float64, db time.Duration, wal float64, hot int64) scaleRun {
		return scaleRun{result: result{PerSecond: rate, DBCPUPerRequest: db}, WALBytesPerCharge: wal,
			Tables: map[string]tableCounters{"payment": {Updated: 10, HOTUpdated: hot}}}
	}
	m := medianScale([]scaleRun{run(300, 3*time.Millisecond, 2000, 1), run(100, 2*time.Millisecond, 3000, 2), run(200, time.Millisecond, 2500, 3)})
	if m.PerSecond != 200 || m.DBCPUPerRequest != 2*time.Millisecond || m.WALBytesPerCharge != 2500 || m.Tables["payment"].HOTUpdated != 3 {
		t.Errorf("medianScale = %v req/s, DB %v, WAL %v, HOT %d; want 200, 2ms, 2500, 3 (the 200 req/s run's)",
			m.PerSecond, m.DBCPUPerRequest, m.WALBytesPerCharge, m.Tables["payment"].HOTUpdated)
	}
}

// The prefill writes the past before the replay keys' charges write the
// present, as time goes in production, so the event-id index of the
// outbox (UUID v7, time-ordered) fills its pages as the service's own
// charges fill them (about 32 bytes per row at fillfactor 90), not half
// (about 57, when every filled id lands left of the replay keys').
func TestFillBetweenChargesKeepsTheEventIDIndexDense(t *testing.T) {
	ctx, dsn, conn := fillDatabase(t)
	// A charge's rows as the service writes them, its event id a UUID v7
	// minted at the charge, as outbox.NewEventID does.
	charge := func(from, to int) error {
		for k := from; k < to; k++ {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			for _, q := range []string{
				`INSERT INTO payment (client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
					VALUES ('bench', $1::bigint, 42, 'sandbox', 'pi_' || $1::bigint::text, 10, 'RUB', 'SUCCEEDED')`,
				`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status, payment_id)
					SELECT 'bench', 'k' || $1::bigint::text, 'h', 'COMPLETED', '{"id":1}', 201, id FROM payment WHERE order_id = $1::bigint`,
			} {
				if _, err := conn.Exec(ctx, q, k+1); err != nil {
					return err
				}
			}
			if _, err := conn.Exec(ctx, `INSERT INTO outbox_event (event_id, topic, message_key, event_type, payload, published_at)
				VALUES ($1, 'payment.events', $2, 'PaymentSucceeded.v1', '{"paymentId":1}', now())`, id, fmt.Sprint(k+1)); err != nil {
				return err
			}
		}
		return nil
	}
	const rows = 100_000
	if err := fillBetweenCharges(ctx, dsn, rows, charge); err != nil {
		t.Fatal(err)
	}
	var n int64
	var perRow float64
	if err := conn.QueryRow(ctx, `SELECT count(*), pg_relation_size('outbox_event_event_id_key')::float8 / count(*) FROM outbox_event`).Scan(&n, &perRow); err != nil {
		t.Fatal(err)
	}
	if n != rows+replayKeys || perRow > 40 {
		t.Errorf("outbox_event: %d rows, event-id index %.1f bytes per row; want %d rows and at most 40 bytes per row (half-full pages take 57)", n, perRow, rows+replayKeys)
	}
}
