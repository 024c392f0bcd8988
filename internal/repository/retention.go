package repository

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
)

// retentionTarget declares how one table is trimmed: which rows are old
// (age < cutoff), what else a row must satisfy to go, and the key the batch
// deletes by. Adding a table to the retention job is one entry below.
type retentionTarget struct {
	table string
	key   string // primary key column(s)
	age   string // the indexed timestamp compared with the cutoff
	also  string // a further condition, SQL over the table's columns
	// mayBeAbsent: the table belongs to a migration that may not be applied
	// in this database yet; a missing table is skipped, not an error.
	mayBeAbsent bool
}

var retentionTargets = map[app.RetentionTable]retentionTarget{
	// R-DIST-IDEM-5: a record is kept for the TTL after it was created. Past
	// it, a COMPLETED record goes, whatever its command: its outcome is
	// final, and the TTL is the rule's for every command. An IN_PROGRESS
	// record goes only if it is a charge's (app.CommandCharge), its lock has
	// expired by the database clock (the clock the claim uses to grant
	// takeovers) and it holds no recovery point (nothingReserved): while
	// the lock is live a request is still working on it, and an expired
	// claim with a reserved payment is the recovery point the completer
	// needs to finish the charge. Once the completer has recorded the
	// outcome it goes with the next run. Another command's unfinished
	// record stays until the completer, which knows that command, finishes
	// or releases it: the purge, which every release runs the same way
	// (the previous release's included), releases only the claims of the
	// one command every release knows.
	// A client that retries after its record is gone is still not charged
	// twice: the payment row's UNIQUE (provider, external id), the second
	// layer of R-DIST-IDEM-4, returns the existing payment.
	app.TableIdempotencyRecord: {
		table: "idempotency_record",
		key:   "client_id, idempotency_key",
		age:   "created_at",
		also:  "(status = 'COMPLETED' OR (command = 'charge' AND locked_until < clock_timestamp() AND " + nothingReserved + "))",
	},
	// R-DIST-IDEM-2: a row is kept for the configured retention, which the
	// configuration keeps at least as long as the idempotency TTL.
	app.TableProcessedEvent: {
		table: "processed_event",
		key:   "event_id, consumer_name", // one row per consumer
		age:   "processed_at",
	},
	// The outbox: published_at is NULL until the relay has published the
	// row, and NULL < cutoff is never true, so an unpublished event is never
	// deleted. The partial index ix_outbox_event_published_at holds exactly the
	// published rows in published_at order, so a batch reads only what it
	// deletes. The table comes with the outbox migration; until that is
	// applied the entry is skipped.
	app.TableOutboxEvent: {
		table:       "outbox_event",
		key:         "id",
		age:         "published_at",
		mayBeAbsent: true,
	},
	// A saga's steps are kept as long as their keys (the idempotency TTL),
	// but for a compensation that still waits for its step: a tombstone
	// or a step's content is what keeps the late or re-sent step from
	// moving money, and within the TTL it is always there.
	app.TableSagaStep: {
		table:       "saga_step",
		key:         "saga_id, step_name",
		age:         "created_at",
		also:        "NOT waiting",
		mayBeAbsent: true,
	},
}

// sql builds the batch delete. The batch is chosen oldest first (the age
// index serves it) and locked with FOR UPDATE SKIP LOCKED, so a row that a
// request holds right now (a claim being completed) is skipped, not waited
// for, and a row changed since the statement began is re-checked against the
// condition before it is locked. The CTE runs once; the DELETE then removes
// exactly the locked rows.
func (t retentionTarget) sql() string {
	cond := t.age + " < @cutoff"
	if t.also != "" {
		cond += " AND " + t.also
	}
	return fmt.Sprintf(`
WITH batch AS (
    SELECT %[2]s FROM %[1]s
     WHERE %[3]s
     ORDER BY %[4]s
     LIMIT @limit
       FOR UPDATE SKIP LOCKED)
DELETE FROM %[1]s WHERE (%[2]s) IN (SELECT %[2]s FROM batch)`, t.table, t.key, cond, t.age)
}

// retentionStmts are the batch deletes, compiled once.
var retentionStmts = func() map[app.RetentionTable]namedSQL {
	stmts := make(map[app.RetentionTable]namedSQL, len(retentionTargets))
	for table, t := range retentionTargets {
		stmts[table] = compileNamed(t.sql())
	}
	return stmts
}()

// tableExistsStmt: the table is in this database.
var tableExistsStmt = compileNamed(`SELECT to_regclass(@table) IS NOT NULL`)

// Retention is what the jobs delete and resume: the rows past their
// retention (app.Retention) and the abandoned claims (app.AbandonedCharges).
type Retention struct {
	db *gorm.DB
}

// NewRetention returns the retention adapter.
func NewRetention(db *gorm.DB) *Retention { return &Retention{db: db} }

// DeleteExpiredBatch implements app.Retention. The statement runs on its
// own (autocommit), which makes each batch its own short transaction.
func (s *Retention) DeleteExpiredBatch(ctx context.Context, table app.RetentionTable, cutoff time.Time, limit int) (int, error) {
	t, ok := retentionTargets[table]
	if !ok {
		return 0, fmt.Errorf("no retention declared for table %q", table)
	}
	if t.mayBeAbsent {
		var exists bool
		r, err := queryRow(ctx, s.db, tableExistsStmt, map[string]any{"table": t.table})
		if err == nil {
			err = r.Scan(&exists)
		}
		if err != nil {
			return 0, mapError(fmt.Errorf("look up table %s: %w", t.table, err))
		}
		if !exists {
			return 0, app.ErrRetentionTableAbsent
		}
	}
	deleted, err := exec(ctx, s.db, retentionStmts[table], map[string]any{"cutoff": cutoff, "limit": limit})
	if err != nil {
		return 0, mapError(fmt.Errorf("delete expired %s: %w", t.table, err))
	}
	return int(deleted), nil
}

// ListAbandoned implements app.AbandonedCharges. The partial index of the
// claims in progress, ix_idempotency_record_in_progress, keeps this cheap
// however many completed records the table holds.
// Expiry is judged by the database clock, the clock the claim uses. Records
// of other commands are filtered out here, not after the LIMIT, so however
// many of them wait, they never crowd the caller's records out of a page.
func (s *Retention) ListAbandoned(ctx context.Context, commands []app.CommandName, expiredFor time.Duration, limit int) ([]app.IdempotencyRecord, error) {
	var out []app.IdempotencyRecord
	err := queryRows(ctx, s.db, listAbandonedStmt, map[string]any{
		"micros": expiredFor.Microseconds(), "commands": commandNames(commands), "limit": limit,
	}, func(r row) error {
		var rec idempotencyRecordRow
		if err := r.Scan(rec.targets()...); err != nil {
			return err
		}
		out = append(out, rec.toApp())
		return nil
	})
	if err != nil {
		return nil, mapError(fmt.Errorf("list abandoned idempotency records: %w", err))
	}
	return out, nil
}

// ReleaseAbandoned implements app.AbandonedCharges. The conditions are
// re-checked in the DELETE itself, so a record that a retry took over after
// it was listed is left alone, and so is one that another command claimed
// under the same key after the listed one went. A record with a recovery
// point, whatever its command (nothingReserved), is never released: its
// reservation may have reached the provider.
func (s *Retention) ReleaseAbandoned(ctx context.Context, commands []app.CommandName, scope app.IdempotencyScope) (bool, error) {
	released, err := exec(ctx, s.db, releaseAbandonedStmt, map[string]any{
		"client": string(scope.ClientID), "key": scope.Key, "commands": commandNames(commands),
	})
	if err != nil {
		return false, mapError(fmt.Errorf("release abandoned idempotency record: %w", err))
	}
	return released == 1, nil
}

// nothingReserved is the condition under which a claim in progress
// reserved nothing, whatever its command, so that nothing of it can have
// reached the provider: it holds no recovery point. Every command's claim
// writes its reservation's id as recovery_point in the statement that
// reserves it (migration 00024); a claim the previous release made, which
// knows the charge only, names its payment in payment_id alone. The
// contract step (docs/deploying.md) leaves "recovery_point IS NULL".
const nothingReserved = "recovery_point IS NULL AND payment_id IS NULL"

// listAbandonedSQL is ListAbandoned's query, releaseAbandonedSQL
// ReleaseAbandoned's.
//
// The list reads ix_idempotency_record_in_progress, every claim in
// progress by command and recovery point, whose predicate is locked_until
// IS NOT NULL (00023, 00024): "locked_until < ..." implies it, in generic
// plans too; it finds the claims of the commands it is given by the
// index's first column, and sorts them (the claims in progress are few:
// an index in locked_until's order, for this list alone, cost every claim
// an entry more, docs/decisions/0038). The release finds its record by
// the key: it compares coalesce(locked_until, ...), which is not strict,
// so its condition implies nothing about locked_until and that index
// cannot serve it. The
// planner would otherwise scan the whole index, thinking it as small as
// the claims in progress at the last analyze, where it also holds an
// entry for every claim completed since the last vacuum. An IN_PROGRESS
// record always has its locked_until (00001's CHECK): coalesce changes
// no answer.
//
// The list answers each record's recovery point, which a claim the
// previous release made has in payment_id alone (nothingReserved): only a
// charge's claim names its payment without a recovery point (00024's
// CHECK), so coalesce is the recovery point of every record.
//
// 'IN_PROGRESS' is written into the SQL, not bound: a generic plan proves
// a partial index's predicate only from values it sees, and with the
// status bound the list's generic plan on 00005's predicate was a scan of
// the whole table (PostgreSQL kept the custom plan only because that one
// cost less). The plan tests explain both (claim_index_plan_test.go).
const (
	listAbandonedSQL = `
SELECT client_id, idempotency_key, command_hash, command, status, response, http_status,
       coalesce(recovery_point, payment_id), lock_token, locked_until, created_at
  FROM idempotency_record
 WHERE status = 'IN_PROGRESS' AND locked_until < clock_timestamp() - @micros * interval '1 microsecond'
   AND command = ANY(@commands)
 ORDER BY locked_until
 LIMIT @limit`
	releaseAbandonedSQL = `
DELETE FROM idempotency_record
 WHERE client_id = @client AND idempotency_key = @key AND command = ANY(@commands) AND status = 'IN_PROGRESS'
   AND coalesce(locked_until, 'infinity') < clock_timestamp() AND ` + nothingReserved
)

var (
	listAbandonedStmt    = compileNamed(listAbandonedSQL)
	releaseAbandonedStmt = compileNamed(releaseAbandonedSQL)
)

// commandNames is commands as the command column holds them. An empty
// list matches no record: a caller that knows no command touches nothing.
func commandNames(commands []app.CommandName) []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = string(c)
	}
	return names
}

var (
	_ app.Retention        = (*Retention)(nil)
	_ app.AbandonedCharges = (*Retention)(nil)
)
