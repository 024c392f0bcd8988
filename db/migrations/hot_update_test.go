package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/testdb"
)

// Migration 00019: a payment's status update that keeps it live (PENDING
// to SUCCEEDED, every successful charge) is a HOT update, one that ends it
// (DECLINED, FAILED) takes it out of the third layer's index; and the third
// layer holds as before, on the schema before the migration (its Down) and
// after it.
//
// The update counts are the session's statistics not yet reported
// (pg_stat_get_xact_tuples_*), read before and after the update in its
// transaction: exact, and no statistics delay or other session moves them.
func TestPaymentStatusUpdateIsHOTAndTheThirdLayerHolds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, p := openProvider(t, testdb.New(t))

	// hotShare reserves a PENDING payment for order, sets its status to
	// final in one transaction, as a charge's phase 3 does (status and
	// updated_at), and returns the updates and HOT updates it made.
	var nextOrder int64
	hotShare := func(t *testing.T, final string) (updates, hot int64) {
		t.Helper()
		nextOrder++
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		counts := func() (updates, hot int64) {
			t.Helper()
			if err := tx.QueryRowContext(ctx, `SELECT pg_stat_get_xact_tuples_updated('payment'::regclass),
				pg_stat_get_xact_tuples_hot_updated('payment'::regclass)`).Scan(&updates, &hot); err != nil {
				t.Fatal(err)
			}
			return updates, hot
		}
		var id int64
		if err := tx.QueryRowContext(ctx, `INSERT INTO payment
			(client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			VALUES ('c', $1, 1, 'sandbox', $2, 10, 'RUB', 'PENDING') RETURNING id`, nextOrder, fmt.Sprint("pi_", nextOrder)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		updatesBefore, hotBefore := counts()
		if _, err := tx.ExecContext(ctx, `UPDATE payment SET status = $2, updated_at = now() WHERE id = $1`, id, final); err != nil {
			t.Fatal(err)
		}
		updates, hot = counts()
		updates, hot = updates-updatesBefore, hot-hotBefore
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return updates, hot
	}

	for _, schema := range []struct {
		name    string
		version int64
		// hotWhenLive: PENDING to SUCCEEDED is HOT.
		hotWhenLive bool
	}{
		{"before 00019", 18, false},
		{"after 00019", 19, true},
		// Every later index of payment keeps the update HOT: 00022's of
		// the authorized payments reads is_authorized, false before and
		// after a one-step charge's record.
		{"after 00022", 22, true},
	} {
		t.Run(schema.name, func(t *testing.T) {
			if _, err := p.DownTo(ctx, schema.version); err != nil {
				t.Fatal(err)
			}
			if _, err := p.UpTo(ctx, schema.version); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				final string
				hot   bool
			}{
				{"SUCCEEDED", schema.hotWhenLive},
				// Out of the partial index: a new index entry can not be
				// avoided, and is not, on either schema.
				{"DECLINED", false},
				{"FAILED", false},
			} {
				updates, hot := hotShare(t, tc.final)
				if updates != 1 || (hot == 1) != tc.hot {
					t.Errorf("PENDING to %s: %d updates, %d HOT; want 1 update, HOT %v", tc.final, updates, hot, tc.hot)
				}
			}
			thirdLayerHolds(ctx, t, db, nextOrder+1)
			nextOrder++
		})
	}
}

// thirdLayerHolds checks the third layer on order: a second live payment is
// a unique violation, a SUCCEEDED one included; once the live one is
// DECLINED, a new attempt may reserve the order.
func thirdLayerHolds(ctx context.Context, t *testing.T, db *sql.DB, order int64) {
	t.Helper()
	reserve := func(external, status string) error {
		_, err := db.ExecContext(ctx, `INSERT INTO payment
			(client_id, order_id, customer_id, payment_provider, external_payment_id, amount, currency, status)
			VALUES ('c', $1, 1, 'sandbox', $2, 10, 'RUB', $3)`, order, fmt.Sprint(external, order), status)
		return err
	}
	if err := reserve("first", "PENDING"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE payment SET status = 'SUCCEEDED' WHERE external_payment_id = $1`, fmt.Sprint("first", order)); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := reserve("second", "PENDING"); !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "ux_payment_order_paid_once" {
		t.Fatalf("a second live payment for a paid order: %v, want a violation of ux_payment_order_paid_once", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE payment SET status = 'DECLINED' WHERE external_payment_id = $1`, fmt.Sprint("first", order)); err != nil {
		t.Fatal(err)
	}
	if err := reserve("third", "PENDING"); err != nil {
		t.Fatalf("a new attempt after a decline: %v", err)
	}
}

// Newest, which the benchmark migrates to and one short of, is the last
// migration goose knows.
func TestNewestIsTheLastMigration(t *testing.T) {
	t.Parallel()
	_, p := openProvider(t, testdb.New(t))
	sources := p.ListSources()
	got, err := migrations.Newest()
	if err != nil || got != sources[len(sources)-1].Version {
		t.Fatalf("Newest() = %d, %v; want %d", got, err, sources[len(sources)-1].Version)
	}
}

// Migration 00019's autovacuum settings: a day's purge of each table the
// retention job trims, under the default retention, deletes more than the
// share of the table that sets autovacuum off, so vacuum follows every
// daily purge and the space the purged rows held is reused the next day.
// At PostgreSQL's default share (0.2) processed_event's daily seventh
// stayed below it.
func TestADaysPurgeSetsAutovacuumOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, _ := openProvider(t, testdb.New(t))
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"DATABASE_URL": "postgres://x", "API_KEYS": "c:s", "SANDBOX_PROVIDER_URL": "http://127.0.0.1:1"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	for table, retention := range map[string]time.Duration{
		"idempotency_record": cfg.Retention.IdempotencyTTL,
		"processed_event":    cfg.Retention.ProcessedEventRetention,
		"outbox_event":       cfg.Retention.OutboxRetention,
	} {
		// The table's own setting, or the server's.
		var share float64
		if err := db.QueryRowContext(ctx, `SELECT coalesce(
			(SELECT split_part(o, '=', 2)::float8 FROM pg_class c, unnest(c.reloptions) o
			  WHERE c.oid = $1::regclass AND o LIKE 'autovacuum_vacuum_scale_factor=%'),
			current_setting('autovacuum_vacuum_scale_factor')::float8)`, table).Scan(&share); err != nil {
			t.Fatal(err)
		}
		daysPurge := float64(24*time.Hour) / float64(retention)
		if daysPurge <= share {
			t.Errorf("%s: a day's purge deletes %.2f of the table, autovacuum waits for %.2f", table, daysPurge, share)
		}
	}
}
