package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/pgtemp"
)

// -scale: what a charge costs as the tables grow. New charges
// and replays at one concurrency (-scale-c) against several databases of
// the same cluster, in alternating passes so that each sees the same noise:
//
//   - "before": the schema without the newest migration (-scale-before),
//     empty: what that migration changes, measured against it;
//   - "empty": every migration, empty;
//   - "prefilled": every migration, its four growing tables filled with
//     -prefill rows each (fill.go) before the newest migration runs, which
//     is timed.
//
// Each run reports what the machine's load barely moves: CPU per charge of
// the service and of the cluster (process accounting), WAL bytes per charge
// and each table's updates and HOT updates (pg_stat_user_tables), besides
// requests/s and p99. Then, with -purge, the purge under load on the
// prefilled database (purge.go).

// scaleTables are the tables that grow with every charge or event.
var scaleTables = []string{"idempotency_record", "payment", "outbox_event", "processed_event"}

// scaleReport is the -scale part of the JSON output.
type scaleReport struct {
	Clients  int            `json:"clients"`
	Passes   int            `json:"passes"`
	Duration time.Duration  `json:"duration"`
	Variants []scaleVariant `json:"variants"`
	Purge    []purgeCycle   `json:"purge,omitempty"`
}

// scaleVariant is one database and its runs.
type scaleVariant struct {
	Name          string `json:"name"`
	SchemaVersion int64  `json:"schemaVersion"`
	Prefill       int64  `json:"prefill"`
	// MigrateNewest is how long the newest migration took over the
	// prefilled rows (zero for the empty databases).
	MigrateNewest time.Duration `json:"migrateNewest,omitempty"`
	Create        []scaleRun    `json:"create"`
	Replay        []scaleRun    `json:"replay"`
	// Sizes are the tables' and indexes' sizes after the last pass.
	Sizes []relationSize `json:"sizes"`

	b *bench
}

// scaleRun is one run's figures: the load's, and what the database did
// over the whole run, warmup included (WAL and table counters cannot be cut
// at the warmup's end; charges are counted over the same span).
type scaleRun struct {
	result
	Charges           int64                    `json:"charges"` // payment rows inserted over the run
	WALBytesPerCharge float64                  `json:"walBytesPerCharge"`
	Tables            map[string]tableCounters `json:"tables"`
}

// tableCounters are pg_stat_user_tables' counters of one table.
type tableCounters struct {
	Inserted   int64 `json:"inserted"`
	Updated    int64 `json:"updated"`
	HOTUpdated int64 `json:"hotUpdated"`
	Deleted    int64 `json:"deleted"`
}

func (c tableCounters) minus(o tableCounters) tableCounters {
	return tableCounters{c.Inserted - o.Inserted, c.Updated - o.Updated, c.HOTUpdated - o.HOTUpdated, c.Deleted - o.Deleted}
}

// relationSize is one table's (heap and TOAST) or index's size on disk.
type relationSize struct {
	Table    string `json:"table"`
	Relation string `json:"relation"`
	Bytes    int64  `json:"bytes"`
	Rows     int64  `json:"rows"` // the table's, on every line of it
}

func (b *bench) scale(ctx context.Context, cluster *pgtemp.Cluster, serviceBin string) (*scaleReport, error) {
	o := b.o
	rep := &scaleReport{Clients: o.scaleC, Passes: o.passes, Duration: o.duration}
	newest, err := migrations.Newest()
	if err != nil {
		return nil, err
	}
	specs := []scaleVariant{
		{Name: "before", SchemaVersion: newest - 1},
		{Name: "empty", SchemaVersion: newest},
	}
	for _, n := range o.prefill {
		specs = append(specs, scaleVariant{Name: prefilledName(n, len(o.prefill)), SchemaVersion: newest, Prefill: n})
	}
	for i := range specs {
		v := &specs[i]
		runs := int64(o.passes)
		if i == len(specs)-1 { // the purge's database: two runs a cycle
			runs += 2 * int64(o.purgeCycles)
		}
		if err := b.scaleDatabase(ctx, cluster, serviceBin, v, runs); err != nil {
			return nil, fmt.Errorf("database %s: %w", v.Name, err)
		}
		defer func() {
			_ = exec1(context.Background(), b.dsn, "DROP DATABASE IF EXISTS scale_"+v.Name+" WITH (FORCE)")
		}()
	}
	for pass := 1; pass <= o.passes; pass++ {
		for i := range specs {
			v := &specs[i]
			for _, workload := range []string{"create", "replay"} {
				r, err := v.b.scaleRun(ctx, serviceBin, workload, o.scaleC, nil)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", v.Name, workload, err)
				}
				report(pass, fmt.Sprintf("%s %s C=%d", v.Name, workload, o.scaleC), r.result)
				logf("pass %d  %-24s DB CPU %5.0f µs/req  WAL %6.0f B/charge  HOT %s", pass, v.Name+" "+workload,
					us(r.DBCPUPerRequest), r.WALBytesPerCharge, hotShares(r.Tables))
				if workload == "create" {
					v.Create = append(v.Create, r)
				} else {
					v.Replay = append(v.Replay, r)
				}
			}
		}
	}
	for i := range specs {
		if specs[i].Sizes, err = sizes(ctx, specs[i].b.dsn); err != nil {
			return nil, err
		}
	}
	rep.Variants = specs
	if o.purgeCycles > 0 {
		last := &specs[len(specs)-1]
		if rep.Purge, err = last.b.purgeUnderLoad(ctx, serviceBin, o.purgeRows, o.purgeCycles); err != nil {
			return nil, fmt.Errorf("purge under load: %w", err)
		}
	}
	return rep, nil
}

// prefilledName names the database of one -prefill size: "prefilled"
// when there is one size (the name docs/capacity_test.go reads), else
// "prefilled_<rows>" (a database name, so no dash).
func prefilledName(rows int64, sizes int) string {
	if sizes == 1 {
		return "prefilled"
	}
	return fmt.Sprintf("prefilled_%d", rows)
}

// scaleDatabase creates v's database, migrates it, seeds its orders (runs
// runs of new charges, and the replay keys), charges the replay keys and,
// for a prefilled one, fills it and then runs the newest migration over
// the rows, timed.
func (b *bench) scaleDatabase(ctx context.Context, cluster *pgtemp.Cluster, serviceBin string, v *scaleVariant, runs int64) error {
	o := b.o
	database := "scale_" + v.Name
	if err := exec1(ctx, b.dsn, "CREATE DATABASE "+database); err != nil {
		return err
	}
	vb := &bench{o: o, dsn: cluster.DSN(database), bindir: b.bindir, tmp: b.tmp, provider: b.provider, postmasterPID: b.postmasterPID}
	v.b = vb
	version := v.SchemaVersion
	if v.Prefill > 0 {
		version-- // filled under the release before, then migrated
	}
	if err := migrations.UpTo(ctx, vb.dsn, version); err != nil {
		return err
	}
	vb.lastOrder = replayKeys + runs*maxLoadThreads*ordersPerThread(o.warmup+o.duration)
	logf("%s: %d orders", database, vb.lastOrder)
	if err := exec1(ctx, vb.dsn, `INSERT INTO order_projection (order_id, customer_id, amount, currency)
		SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, $1::bigint) g`, vb.lastOrder); err != nil {
		return err
	}
	charge := func(from, to int) error {
		stop, err := vb.startService(ctx, serviceBin)
		if err != nil {
			return err
		}
		defer stop()
		return vb.chargeReplayKeyRange(ctx, from, to)
	}
	if v.Prefill == 0 {
		if err := charge(0, replayKeys); err != nil {
			return err
		}
		return exec1(ctx, vb.dsn, "VACUUM ANALYZE")
	}
	started := time.Now()
	if err := fillBetweenCharges(ctx, vb.dsn, v.Prefill, charge); err != nil {
		return err
	}
	logf("%s: filled %d rows into each of %s in %s", database, v.Prefill, strings.Join(scaleTables, ", "), time.Since(started).Round(time.Second))
	started = time.Now()
	if err := migrations.UpTo(ctx, vb.dsn, v.SchemaVersion); err != nil {
		return err
	}
	v.MigrateNewest = time.Since(started)
	logf("%s: migration %d over %d payments took %s", database, v.SchemaVersion, v.Prefill, v.MigrateNewest.Round(time.Millisecond))
	// What autovacuum leaves on a table in service: statistics, hint bits
	// and the visibility map.
	return exec1(ctx, vb.dsn, "VACUUM ANALYZE")
}

// fillBetweenCharges fills n rows per table between the first replay key's
// charge and the others'. The fill copies its rows' shapes from one charge
// of the service's, then writes the past (every filled time is before the
// fill ends), then the rest of the replay keys are charged: rows in the
// order of their times, as a service in production writes them. With
// every replay key charged before the fill, their outbox event ids (UUID
// v7, minted then) sat at the right end of outbox_event_event_id_key; each
// filled id, older, went into the page just left of them, and a split
// there halves a page where one at the right end leaves it 90 % full: 57
// bytes per row instead of 32 (docs/capacity.md).
func fillBetweenCharges(ctx context.Context, dsn string, n int64, charge func(from, to int) error) error {
	if err := charge(0, 1); err != nil {
		return err
	}
	if err := fill(ctx, dsn, n, false); err != nil {
		return err
	}
	return charge(1, replayKeys)
}

// scaleRun runs workload at clients on a freshly started service and reads
// the database's counters before and after. The service is stopped before
// the second reading: its connections report their statistics as they end.
// During, if not nil, runs beside the load.
func (b *bench) scaleRun(ctx context.Context, serviceBin, workload string, clients int, during func() error) (scaleRun, error) {
	stop, err := b.startService(ctx, serviceBin)
	if err != nil {
		return scaleRun{}, err
	}
	before, beforeWAL, err := counters(ctx, b.dsn)
	if err != nil {
		stop()
		return scaleRun{}, err
	}
	duringErr := make(chan error, 1)
	if during != nil {
		go func() { duringErr <- during() }()
	}
	r, err := b.load(ctx, workload, clients, b.o.warmup, b.o.duration, false)
	stop()
	if during != nil {
		if derr := <-duringErr; err == nil {
			err = derr
		}
	}
	if err != nil {
		return scaleRun{}, err
	}
	// A backend reports its statistics as it exits, just after the
	// service's connections close.
	time.Sleep(time.Second)
	after, afterWAL, err := counters(ctx, b.dsn)
	if err != nil {
		return scaleRun{}, err
	}
	run := scaleRun{result: r, Tables: map[string]tableCounters{}}
	for _, t := range scaleTables {
		run.Tables[t] = after[t].minus(before[t])
	}
	run.Charges = run.Tables["payment"].Inserted
	if run.Charges > 0 {
		run.WALBytesPerCharge = float64(afterWAL-beforeWAL) / float64(run.Charges)
	}
	return run, nil
}

// counters reads the growing tables' counters and the cluster's WAL
// position (bytes since its start).
func counters(ctx context.Context, dsn string) (map[string]tableCounters, int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables WHERE relname = ANY($1)`, scaleTables)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]tableCounters{}
	for rows.Next() {
		var name string
		var c tableCounters
		if err := rows.Scan(&name, &c.Inserted, &c.Updated, &c.HOTUpdated, &c.Deleted); err != nil {
			return nil, 0, err
		}
		out[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	var wal int64
	err = conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&wal)
	return out, wal, err
}

// sizes lists the growing tables' and their indexes' sizes, and each
// table's exact row count.
func sizes(ctx context.Context, dsn string) ([]relationSize, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `
		SELECT t.relname, t.relname, pg_table_size(t.oid) FROM pg_class t WHERE t.relname = ANY($1)
		UNION ALL
		SELECT t.relname, i.relname, pg_relation_size(i.oid)
		  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		 WHERE t.relname = ANY($1)
		 ORDER BY 1, 2`, scaleTables)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (relationSize, error) {
		var s relationSize
		return s, r.Scan(&s.Table, &s.Relation, &s.Bytes)
	})
	if err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	for _, t := range scaleTables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&n); err != nil {
			return nil, err
		}
		counts[t] = n
	}
	for i := range out {
		out[i].Rows = counts[out[i].Table]
	}
	return out, nil
}

// hotShares formats each table's HOT updates out of its updates.
func hotShares(tables map[string]tableCounters) string {
	var parts []string
	for _, t := range scaleTables {
		if c := tables[t]; c.Updated > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/%d", t, c.HOTUpdated, c.Updated))
		}
	}
	return strings.Join(parts, ", ")
}

// scaleTable prints the medians of each database's runs side by side, with
// each database's ratio to "empty".
func (r *scaleReport) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "Cost as the tables grow: medians of %d passes, %s each, C=%d:\n\n", r.Passes, r.Duration, r.Clients)
	s.WriteString("| database | rows per table | create req/s | p99 ms | service CPU µs/charge | DB CPU µs/charge | WAL B/charge | HOT payment | HOT idempotency_record | replay req/s | p99 ms | DB CPU µs/replay |\n")
	s.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range r.Variants {
		c, rp := medianScale(v.Create), medianScale(v.Replay)
		fmt.Fprintf(&s, "| %s (schema %d) | %d | %.0f | %.2f | %.0f | %.0f | %.0f | %s | %s | %.0f | %.2f | %.0f |\n",
			v.Name, v.SchemaVersion, v.Prefill, c.PerSecond, ms(c.P99), us(c.CPUPerRequest), us(c.DBCPUPerRequest),
			c.WALBytesPerCharge, share(c.Tables["payment"]), share(c.Tables["idempotency_record"]),
			rp.PerSecond, ms(rp.P99), us(rp.DBCPUPerRequest))
	}
	for _, p := range r.Variants[min(2, len(r.Variants)):] {
		e := r.Variants[1]
		ec, pc, er, pr := medianScale(e.Create), medianScale(p.Create), medianScale(e.Replay), medianScale(p.Replay)
		fmt.Fprintf(&s, "\n%s / empty: create %.2f (p99 %.2f), replay %.2f (p99 %.2f); migration %d over %d payments: %s\n",
			p.Name, pc.PerSecond/ec.PerSecond, ms(pc.P99)/ms(ec.P99), pr.PerSecond/er.PerSecond, ms(pr.P99)/ms(er.P99),
			p.SchemaVersion, p.Prefill, p.MigrateNewest.Round(time.Millisecond))
	}
	for _, v := range r.Variants {
		fmt.Fprintf(&s, "\nSizes, %s:\n", v.Name)
		for _, z := range v.Sizes {
			perRow := 0.0
			if z.Rows > 0 {
				perRow = float64(z.Bytes) / float64(z.Rows)
			}
			fmt.Fprintf(&s, "  %-20s %-45s %10d rows %12d bytes %7.1f B/row\n", z.Table, z.Relation, z.Rows, z.Bytes, perRow)
		}
	}
	if len(r.Purge) > 0 {
		s.WriteString("\n" + purgeTable(r.Purge))
	}
	return s.String()
}

func share(c tableCounters) string {
	if c.Updated == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*float64(c.HOTUpdated)/float64(c.Updated))
}

// medianScale takes the median of each figure on its own, as median does;
// the table counters are those of the run with the median requests/s.
func medianScale(rs []scaleRun) scaleRun {
	if len(rs) == 0 {
		return scaleRun{}
	}
	m := rs[0]
	rate := medianBy(rs, func(r scaleRun) float64 { return r.PerSecond })
	for _, r := range rs {
		if r.PerSecond == rate {
			m = r
		}
	}
	m.result = median(results(rs))
	m.WALBytesPerCharge = medianBy(rs, func(r scaleRun) float64 { return r.WALBytesPerCharge })
	return m
}

func results(rs []scaleRun) []result {
	out := make([]result, len(rs))
	for i, r := range rs {
		out[i] = r.result
	}
	return out
}

// runCleanup runs `payment-service cleanup` once against b's database:
// the retention purge of every table, as an operator or the nightly job
// runs it, at rowsPerSecond (CLEANUP_ROWS_PER_SECOND; nil: its default).
func (b *bench) runCleanup(ctx context.Context, serviceBin string, rowsPerSecond *int) error {
	cmd := exec.CommandContext(ctx, serviceBin, "cleanup")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+b.dsn, "API_KEYS=bench:"+apiKey, "SANDBOX_PROVIDER_URL="+b.provider.URL)
	if rowsPerSecond != nil {
		cmd.Env = append(cmd.Env, fmt.Sprintf("CLEANUP_ROWS_PER_SECOND=%d", *rowsPerSecond))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cleanup: %w\n%s", err, out)
	}
	return os.WriteFile(filepath.Join(b.tmp, "cleanup.log"), out, 0o644)
}
