package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/pgtemp"
)

// The cold start (docs/decisions/0017): a deploy on a new database, or on a restored
// one whose near-empty tables have been analyzed. PostgreSQL caches a
// prepared statement's generic plan after five executions, and a plan made
// while payment and idempotency_record held a few rows scans them in full;
// nothing replans it until autovacuum analyzes the grown tables, up to a
// minute (autovacuum_naptime) later. The measurement starts the service on
// a freshly migrated database whose every table has been analyzed (empty
// but for the orders), charges at -cold-c from its first request in parts
// of -cold-part, then analyzes the grown tables itself, as autovacuum
// eventually would, and measures the steady state on the same process.

// coldStart is one binary's cold start.
type coldStart struct {
	Binary      string `json:"binary"` // "service" or "compare"
	Concurrency int    `json:"concurrency"`
	// Parts are consecutive, from the service's first request.
	Parts []result `json:"parts"`
	// Steady are the parts after ANALYZE of the grown tables.
	Steady []result `json:"steady"`
	// Autoanalyzed is, for each hot table autovacuum analyzed during the
	// cold parts, how long after the first request it last did.
	Autoanalyzed map[string]time.Duration `json:"autoanalyzed,omitempty"`
}

// coldStarts measures the cold start of the service and of -compare-bin's
// binary, each on a database of its own.
func (b *bench) coldStarts(ctx context.Context, cluster *pgtemp.Cluster, serviceBin string) ([]coldStart, error) {
	bins := []struct{ who, bin string }{{"service", serviceBin}}
	if b.o.compareBin != "" {
		bins = append(bins, struct{ who, bin string }{"compare", b.o.compareBin})
	}
	var out []coldStart
	for _, x := range bins {
		cs, err := b.coldStart(ctx, cluster, x.who, x.bin)
		if err != nil {
			return nil, fmt.Errorf("cold start of %s: %w", x.who, err)
		}
		out = append(out, cs)
	}
	return out, nil
}

func (b *bench) coldStart(ctx context.Context, cluster *pgtemp.Cluster, who, bin string) (coldStart, error) {
	o := b.o
	cs := coldStart{Binary: who, Concurrency: o.coldC}
	coldParts, steadyParts := parts(o.coldStart, o.coldPart), parts(o.coldSteady, o.coldPart)
	database := "cold_" + who
	if err := exec1(ctx, b.dsn, "CREATE DATABASE "+database); err != nil {
		return cs, err
	}
	defer func() { _ = exec1(context.Background(), b.dsn, "DROP DATABASE IF EXISTS "+database+" WITH (FORCE)") }()
	cold := &bench{o: o, dsn: cluster.DSN(database), bindir: b.bindir, tmp: b.tmp, provider: b.provider, postmasterPID: b.postmasterPID}
	if err := migrations.Up(ctx, cold.dsn); err != nil {
		return cs, err
	}
	cold.lastOrder = int64(coldParts+steadyParts) * maxLoadThreads * ordersPerThread(o.coldPart)
	logf("cold start of %s: %d orders, then VACUUM ANALYZE of the whole database", who, cold.lastOrder)
	if err := exec1(ctx, cold.dsn, `INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, $1::bigint) g`, cold.lastOrder); err != nil {
		return cs, err
	}
	// What a restore (vacuumdb --analyze) or a careful operator leaves:
	// statistics for every table, the hot ones saying "empty".
	if err := exec1(ctx, cold.dsn, "VACUUM ANALYZE"); err != nil {
		return cs, err
	}
	stop, err := cold.startService(ctx, bin)
	if err != nil {
		return cs, err
	}
	defer stop()
	started := time.Now()
	stats, err := pgx.Connect(ctx, cold.dsn)
	if err != nil {
		return cs, err
	}
	defer stats.Close(context.Background())
	measure := func(n int, label string) ([]result, error) {
		var rs []result
		for i := range n {
			before, err := hotRowsRead(ctx, stats)
			if err != nil {
				return nil, err
			}
			r, err := cold.load(ctx, "create", o.coldC, 0, o.coldPart, false)
			if err != nil {
				return nil, err
			}
			after, err := hotRowsRead(ctx, stats)
			if err != nil {
				return nil, err
			}
			if r.Requests > 0 {
				r.HotRowsPerRequest = float64(after-before) / float64(r.Requests)
			}
			rs = append(rs, r)
			report(0, fmt.Sprintf("%s %s %d", who, label, i+1), r)
		}
		return rs, nil
	}
	if cs.Parts, err = measure(coldParts, "cold"); err != nil {
		return cs, err
	}
	if cs.Autoanalyzed, err = autoanalyzed(ctx, cold.dsn, started); err != nil {
		return cs, err
	}
	// What autovacuum does sooner or later; it also invalidates every
	// plan cached on the grown tables.
	if err := exec1(ctx, cold.dsn, "ANALYZE"); err != nil {
		return cs, err
	}
	cs.Steady, err = measure(steadyParts, "steady")
	return cs, err
}

// hotRowsRead is how many rows of payment and idempotency_record the
// database has read so far, by sequential and index scans: a charge reads
// a few by their keys, and a plan that scans a table reads all of it, so
// the count per request shows a bad plan whatever the machine's noise.
// Each backend reports its counts at most once a second, so a part's count
// is good to about a second's worth.
func hotRowsRead(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `
		SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint FROM pg_stat_user_tables
		 WHERE relname IN ('payment', 'idempotency_record')`).Scan(&n)
	return n, err
}

// parts is how many parts of part make d (at least one).
func parts(d, part time.Duration) int { return max(1, int(d/part)) }

// autoanalyzed reads when autovacuum last analyzed each hot table, as a
// time after started.
func autoanalyzed(ctx context.Context, dsn string, started time.Time) (map[string]time.Duration, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `
		SELECT relname, last_autoanalyze FROM pg_stat_user_tables
		 WHERE relname IN ('payment', 'idempotency_record', 'outbox_event') AND last_autoanalyze IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var table string
		var at time.Time
		if err := rows.Scan(&table, &at); err != nil {
			return nil, err
		}
		out[table] = at.Sub(started).Round(time.Second)
	}
	return out, rows.Err()
}

// total is parts as one run: requests over the summed time, and CPU per
// request weighted by each part's requests.
func total(parts []result) result {
	var t result
	var cpu, dbCPU time.Duration
	var rows float64
	for _, r := range parts {
		rows += r.HotRowsPerRequest * float64(r.Requests)
		t.Requests += r.Requests
		t.Errors += r.Errors
		t.Duration += r.Duration
		cpu += r.CPUPerRequest * time.Duration(r.Requests)
		dbCPU += r.DBCPUPerRequest * time.Duration(r.Requests)
	}
	if t.Duration > 0 {
		t.PerSecond = float64(t.Requests) / t.Duration.Seconds()
	}
	if t.Requests > 0 {
		t.CPUPerRequest = cpu / time.Duration(t.Requests)
		t.DBCPUPerRequest = dbCPU / time.Duration(t.Requests)
		t.HotRowsPerRequest = rows / float64(t.Requests)
	}
	return t
}

// ratios are the cold start's figures against its steady state: the cold
// parts together, and the slowest of them.
func (c coldStart) ratios() (whole, slowest float64) {
	steady := total(c.Steady).PerSecond
	if steady == 0 || len(c.Parts) == 0 {
		return 0, 0
	}
	low := c.Parts[0].PerSecond
	for _, r := range c.Parts {
		low = min(low, r.PerSecond)
	}
	return total(c.Parts).PerSecond / steady, low / steady
}

// coldStartTable is the cold starts as a Markdown table, then each one's
// parts.
func coldStartTable(cs []coldStart) string {
	var b strings.Builder
	if len(cs) == 0 {
		return ""
	}
	first := total(cs[0].Parts)
	fmt.Fprintf(&b, "Cold start: new charges at C=%d from the first request on an analyzed, empty database, %s (in parts of %s), then after ANALYZE:\n\n",
		cs[0].Concurrency, first.Duration, cs[0].Parts[0].Duration)
	b.WriteString("| binary | cold req/s | steady req/s | ratio | slowest part | CPU µs/req cold | steady | db CPU µs/req cold | steady | hot rows read/req cold | steady | autoanalyzed after |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cs {
		cold, steady := total(c.Parts), total(c.Steady)
		whole, slowest := c.ratios()
		auto := "–"
		if len(c.Autoanalyzed) > 0 {
			var s []string
			for _, t := range []string{"payment", "idempotency_record", "outbox_event"} {
				if d, ok := c.Autoanalyzed[t]; ok {
					s = append(s, fmt.Sprintf("%s %s", t, d))
				}
			}
			auto = strings.Join(s, ", ")
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s |\n", c.Binary,
			cold.PerSecond, steady.PerSecond, whole, slowest,
			us(cold.CPUPerRequest), us(steady.CPUPerRequest), us(cold.DBCPUPerRequest), us(steady.DBCPUPerRequest),
			cold.HotRowsPerRequest, steady.HotRowsPerRequest, auto)
	}
	// The database's CPU per request rises part by part while a cached
	// plan scans a growing table: a sign that the machine's noise in
	// requests/s hides less.
	b.WriteString("\nreq/s (db CPU µs/req, hot rows read/req) of each part:\n\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "- %s: cold", c.Binary)
		for _, r := range c.Parts {
			fmt.Fprintf(&b, " %.0f (%.0f, %.0f)", r.PerSecond, us(r.DBCPUPerRequest), r.HotRowsPerRequest)
		}
		b.WriteString("; steady")
		for _, r := range c.Steady {
			fmt.Fprintf(&b, " %.0f (%.0f, %.0f)", r.PerSecond, us(r.DBCPUPerRequest), r.HotRowsPerRequest)
		}
		b.WriteString("\n")
	}
	return b.String()
}
