package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The per-statement measurement (-statements): one run of new charges and
// one of replays, each against statistics reset just before it, divided
// by the requests the run made. pg_stat_statements (track_planning on)
// gives each statement's calls, planning and execution time, buffers and
// WAL; pg_stat_user_tables the rows each table took and how many of its
// updates were HOT (no index entry written); pg_stat_wal and
// pg_stat_database the WAL and transactions of the whole cluster.

// statsFlush is how long to wait for every backend's statistics to be in
// the shared counters: an idle backend flushes its table and WAL
// statistics within 10 s (PGSTAT_IDLE_INTERVAL) of its last transaction.
const statsFlush = 11 * time.Second

// hotStatements name the hot path's statements by their text (their files
// are in internal/repository/statements).
var hotStatements = []struct{ label, contains string }{
	{"a new saga step's claim (claimStepAndReserveSQL)", "begun AS ("},
	{"claim (claimAndReserveSQL)", "matching_order AS ("},
	{"lookup (lookupKeySQL)", "SELECT command_hash, status, http_status, response::text"},
	{"record (recordOutcomeSQL)", "completed AS (\n    UPDATE idempotency_record"},
	{"lock check (lockStillHeldStmt)", "SELECT EXISTS (SELECT 1 FROM idempotency_record\n"},
	{"outbox relay claim", "FROM outbox_event"},
}

func statementLabel(query string) string {
	for _, s := range hotStatements {
		if strings.Contains(query, s.contains) {
			return s.label
		}
	}
	q := strings.Join(strings.Fields(query), " ")
	if len(q) > 60 {
		q = q[:60] + "…"
	}
	return "`" + q + "`"
}

// statementRuns measures create and replay at o.statementsC on the
// running service and prints a table of each.
func (b *bench) statementRuns(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return err
	}
	var out strings.Builder
	for _, workload := range []string{"create", "replay"} {
		logf("statements: waiting %s for the statistics to settle, then %s at %d clients for %s", statsFlush, workload, b.o.statementsC, b.o.duration)
		time.Sleep(statsFlush)
		for _, reset := range []string{`SELECT pg_stat_statements_reset()`, `SELECT pg_stat_reset()`, `SELECT pg_stat_reset_shared('wal')`} {
			if _, err := conn.Exec(ctx, reset); err != nil {
				return err
			}
		}
		r, err := b.load(ctx, workload, b.o.statementsC, 0, b.o.duration, false)
		if err != nil {
			return err
		}
		report(0, name("statements", workload, b.o.statementsC), r)
		time.Sleep(statsFlush)
		n := float64(r.Requests + r.Errors)
		fmt.Fprintf(&out, "\n%s at %d clients, %s, %.0f requests (%.0f req/s):\n\n", workload, b.o.statementsC, b.o.duration, n, r.PerSecond)
		if err := statementTable(ctx, conn, n, &out); err != nil {
			return err
		}
		if err := tableTable(ctx, conn, n, &out); err != nil {
			return err
		}
	}
	if err := indexList(ctx, conn, &out); err != nil {
		return err
	}
	fmt.Println(out.String())
	return nil
}

func statementTable(ctx context.Context, conn *pgx.Conn, n float64, out *strings.Builder) error {
	rows, err := conn.Query(ctx, `
		SELECT query, calls, plans, mean_plan_time, mean_exec_time,
		       shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
		       wal_records, wal_fpi, wal_bytes
		  FROM pg_stat_statements
		 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		   AND query !~* 'pg_stat'
		   AND calls >= $1
		 ORDER BY total_exec_time + total_plan_time DESC`, max(1, n/20))
	if err != nil {
		return err
	}
	defer rows.Close()
	out.WriteString("| statement | calls/req | plans/call | plan ms | exec ms | shared hit/call | read/call | dirtied/call | written/call | WAL records/call | FPI/call | WAL bytes/call |\n")
	out.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for rows.Next() {
		var query string
		var calls, plans, hit, read, dirtied, written, walRecords, fpi int64
		var planMS, execMS, walBytes float64
		if err := rows.Scan(&query, &calls, &plans, &planMS, &execMS, &hit, &read, &dirtied, &written, &walRecords, &fpi, &walBytes); err != nil {
			return err
		}
		c := float64(calls)
		fmt.Fprintf(out, "| %s | %.2f | %.3f | %.4f | %.4f | %.1f | %.2f | %.2f | %.2f | %.2f | %.3f | %.0f |\n",
			statementLabel(query), c/n, float64(plans)/c, planMS, execMS, float64(hit)/c, float64(read)/c,
			float64(dirtied)/c, float64(written)/c, float64(walRecords)/c, float64(fpi)/c, walBytes/c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var walBytes, walSync, xacts float64
	if err := conn.QueryRow(ctx, `SELECT wal_bytes::float8, wal_sync::float8,
		       (SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database WHERE datname = current_database())
		  FROM pg_stat_wal`).Scan(&walBytes, &walSync, &xacts); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nWhole cluster per request: %.0f WAL bytes, %.2f WAL syncs, %.2f transactions of this database.\n\n", walBytes/n, walSync/n, xacts/n)
	return nil
}

func tableTable(ctx context.Context, conn *pgx.Conn, n float64, out *strings.Builder) error {
	rows, err := conn.Query(ctx, `
		SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, coalesce(idx_scan, 0)
		  FROM pg_stat_user_tables
		 WHERE n_tup_ins + n_tup_upd + n_tup_del + coalesce(idx_scan, 0) > 0
		 ORDER BY relname`)
	if err != nil {
		return err
	}
	defer rows.Close()
	out.WriteString("| table | inserts/req | updates/req | of them HOT | deletes/req | seq scans/req | index scans/req |\n|---|---|---|---|---|---|---|\n")
	for rows.Next() {
		var rel string
		var ins, upd, hot, del, seq, idx int64
		if err := rows.Scan(&rel, &ins, &upd, &hot, &del, &seq, &idx); err != nil {
			return err
		}
		hotShare := "-"
		if upd > 0 {
			hotShare = fmt.Sprintf("%d of %d", hot, upd)
		}
		fmt.Fprintf(out, "| %s | %.2f | %.2f | %s | %.2f | %.2f | %.2f |\n", rel, float64(ins)/n, float64(upd)/n, hotShare, float64(del)/n, float64(seq)/n, float64(idx)/n)
	}
	return rows.Err()
}

// indexList prints the hot tables' indexes: an insert enters each one
// whose predicate its row meets, a non-HOT update too, a HOT update none.
func indexList(ctx context.Context, conn *pgx.Conn, out *strings.Builder) error {
	rows, err := conn.Query(ctx, `
		SELECT tablename, indexdef FROM pg_indexes
		 WHERE tablename IN ('idempotency_record', 'payment', 'outbox_event', 'processed_event')
		 ORDER BY tablename, indexname`)
	if err != nil {
		return err
	}
	defer rows.Close()
	out.WriteString("\nIndexes of the tables the hot path writes:\n\n")
	for rows.Next() {
		var table, def string
		if err := rows.Scan(&table, &def); err != nil {
			return err
		}
		fmt.Fprintf(out, "- %s: `%s`\n", table, def)
	}
	return rows.Err()
}
