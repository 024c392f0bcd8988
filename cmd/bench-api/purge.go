package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The purge under load (-purge-cycles): on the prefilled database, each
// cycle adds a day's worth of expired rows to every table the retention
// job trims (fill with expired), measures new charges at -scale-c, then
// measures them again while `payment-service cleanup` deletes those rows
// (the purge starts as the measured part does), waits for autovacuum to
// have visited each purged table, and records the tables' and indexes'
// sizes. Growing sizes from cycle to cycle are bloat that vacuum does not
// take back.

// purgeCycle is one cycle's figures.
type purgeCycle struct {
	Cycle   int   `json:"cycle"`
	Expired int64 `json:"expired"` // rows added to each table, past retention
	// RowsPerSecond is the purge's pace (CLEANUP_ROWS_PER_SECOND, 0:
	// unpaced); nil: the service's default, not set by -purge-rates.
	RowsPerSecond *int `json:"rowsPerSecond,omitempty"`
	// Before is the runs of new charges before the purge, During the one
	// the purge ran beside.
	Before scaleRun `json:"before"`
	During scaleRun `json:"during"`
	// PurgeTime is the purge's wall time; Deleted the rows it deleted in
	// all tables.
	PurgeTime time.Duration `json:"purgeTime"`
	Deleted   int64         `json:"deleted"`
	// Autovacuumed is how long after the purge autovacuum had finished
	// with every purged table; zero if it had not within autovacuumWait.
	Autovacuumed time.Duration  `json:"autovacuumed"`
	Sizes        []relationSize `json:"sizes"`
}

// autovacuumWait bounds the wait for autovacuum after a purge.
const autovacuumWait = 5 * time.Minute

func (b *bench) purgeUnderLoad(ctx context.Context, serviceBin string, rows int64, cycles int) ([]purgeCycle, error) {
	var out []purgeCycle
	for i := 1; i <= cycles; i++ {
		c := purgeCycle{Cycle: i, Expired: rows}
		if rates := b.o.purgeRates; len(rates) > 0 {
			// In turn, so that each pace sees the same tables' growth and
			// the same machine.
			c.RowsPerSecond = &rates[(i-1)%len(rates)]
		}
		started := time.Now()
		if err := fill(ctx, b.dsn, rows, true); err != nil {
			return nil, err
		}
		// The day's rows arrived over a day, and autovacuum analyzed the
		// tables along the way.
		if err := exec1(ctx, b.dsn, "ANALYZE"); err != nil {
			return nil, err
		}
		logf("purge cycle %d: %d expired rows per table in %s", i, rows, time.Since(started).Round(time.Second))
		var err error
		if c.Before, err = b.scaleRun(ctx, serviceBin, "create", b.o.scaleC, nil); err != nil {
			return nil, err
		}
		purge := func() error {
			time.Sleep(b.o.warmup)
			started := time.Now()
			err := b.runCleanup(ctx, serviceBin, c.RowsPerSecond)
			c.PurgeTime = time.Since(started)
			return err
		}
		if c.During, err = b.scaleRun(ctx, serviceBin, "create", b.o.scaleC, purge); err != nil {
			return nil, err
		}
		purged := time.Now()
		for _, t := range c.During.Tables {
			c.Deleted += t.Deleted
		}
		if c.Autovacuumed, err = waitForAutovacuum(ctx, b.dsn, purged); err != nil {
			return nil, err
		}
		if c.Sizes, err = sizes(ctx, b.dsn); err != nil {
			return nil, err
		}
		logf("purge cycle %d: create %.0f -> %.0f req/s, p99 %.2f -> %.2f ms; purge %d rows in %s (%.0f rows/s); autovacuum done after %s",
			i, c.Before.PerSecond, c.During.PerSecond, ms(c.Before.P99), ms(c.During.P99), c.Deleted,
			c.PurgeTime.Round(time.Millisecond), c.rate(), c.Autovacuumed.Round(time.Second))
		out = append(out, c)
	}
	return out, nil
}

// paceLabel is the cycle's pace as the table shows it.
func (c purgeCycle) paceLabel() string {
	switch {
	case c.RowsPerSecond == nil:
		return "default"
	case *c.RowsPerSecond == 0:
		return "none"
	}
	return fmt.Sprint(*c.RowsPerSecond)
}

func (c purgeCycle) rate() float64 {
	if c.PurgeTime <= 0 {
		return 0
	}
	return float64(c.Deleted) / c.PurgeTime.Seconds()
}

// waitForAutovacuum waits, at most autovacuumWait, until autovacuum has
// finished a vacuum of each purged table that began after since, and
// returns how long after since that was (zero if it did not).
func waitForAutovacuum(ctx context.Context, dsn string, since time.Time) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	tables := make([]string, 0, len(retentionWindows))
	for t := range retentionWindows {
		tables = append(tables, t)
	}
	for deadline := time.Now().Add(autovacuumWait); time.Now().Before(deadline); {
		var done int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables
			WHERE relname = ANY($1) AND last_autovacuum > $2`, tables, since).Scan(&done); err != nil {
			return 0, err
		}
		if done == len(tables) {
			return time.Since(since), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
	return 0, nil
}

// purgeTable prints each cycle: charges before and during the purge, the
// purge's rate, and the sizes summed per table.
func purgeTable(cs []purgeCycle) string {
	var s strings.Builder
	s.WriteString("Purge under load:\n\n| cycle | purge rows/s limit | expired rows per table | create req/s before | during | ratio | p99 ms before | during | ratio | purged rows | purge s | rows/s | autovacuum done after s |")
	for _, t := range scaleTables {
		fmt.Fprintf(&s, " %s MB |", t)
	}
	s.WriteString("\n|---|---|---|---|---|---|---|---|---|---|---|---|---|" + strings.Repeat("---|", len(scaleTables)) + "\n")
	for _, c := range cs {
		fmt.Fprintf(&s, "| %d | %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %d | %.1f | %.0f | %.0f |",
			c.Cycle, c.paceLabel(), c.Expired, c.Before.PerSecond, c.During.PerSecond, c.During.PerSecond/c.Before.PerSecond,
			ms(c.Before.P99), ms(c.During.P99), ms(c.During.P99)/ms(c.Before.P99),
			c.Deleted, c.PurgeTime.Seconds(), c.rate(), c.Autovacuumed.Seconds())
		total := map[string]int64{}
		for _, z := range c.Sizes {
			total[z.Table] += z.Bytes
		}
		for _, t := range scaleTables {
			fmt.Fprintf(&s, " %.1f |", float64(total[t])/(1<<20))
		}
		s.WriteString("\n")
	}
	return s.String()
}
