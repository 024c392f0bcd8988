//go:build pgbench

// pgbench is not among make test's packages: the downloaded PostgreSQL
// has none (docs/decisions/0023-postgresql-binaries.md). `make
// test-pgbench` runs this file where Debian's postgresql is installed, as
// CI does.

package main

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/pgtemp"
)

// The ceiling's scripts run as the benchmark runs them (prepared, the
// same -D variables) on a migrated database, and do the service's work: a
// charge script's transaction leaves a SUCCEEDED payment, a COMPLETED key
// and its event, and a replay finds its key. The text of the scripts is
// kept in step with the service's statements by a test of its own
// (internal/repository); this one shows that they still run: a column of
// phase 1's answer that \gset would take for phase 3's variable, say.
func TestPgbenchScriptsRunOnTheSchema(t *testing.T) {
	ctx, dsn, conn := fillDatabase(t)
	bindir, err := pgtemp.BinDir()
	if err != nil {
		t.Fatalf("no PostgreSQL binaries: %v", err)
	}
	pgbench, err := pgbenchBinary(bindir)
	if err != nil {
		t.Fatal(err)
	}
	const charges = 5
	for _, q := range []string{
		`INSERT INTO order_projection (order_id, customer_id, amount, currency) SELECT g, 42, 10.00, 'RUB' FROM generate_series(1, 10) g`,
		`CREATE SEQUENCE pgbench_order START 1 MAXVALUE 10`,
		fmt.Sprintf(`INSERT INTO idempotency_record (client_id, idempotency_key, command_hash, status, response, http_status)
			SELECT 'bench', g::text, 'h', 'COMPLETED', '{"id":1}', 201 FROM generate_series(%d, %d) g`, firstReplayKey, firstReplayKey+replayKeys-1),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	run := func(script string) {
		t.Helper()
		args := []string{"-n", "-M", "prepared", "-t", strconv.Itoa(charges),
			"-f", filepath.Join("..", "..", pgbenchDir, script+".pgbench")}
		for _, k := range slices.Sorted(maps.Keys(pgbenchVars)) {
			args = append(args, "-D", k+"="+pgbenchVars[k])
		}
		// The database's URL as pgbench's dbname: libpq reads it whole.
		args = append(args, dsn)
		cmd := exec.CommandContext(ctx, pgbench, args...)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "number of failed transactions: 0") {
			t.Fatalf("pgbench %s: %v\n%s", script, err, out)
		}
	}
	run("charge")
	var payments, completed, events int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM payment WHERE status = 'SUCCEEDED'),
		(SELECT count(*) FROM idempotency_record r JOIN payment p ON p.id = r.payment_id WHERE r.status = 'COMPLETED'),
		(SELECT count(*) FROM outbox_event)`).Scan(&payments, &completed, &events); err != nil {
		t.Fatal(err)
	}
	if payments != charges || completed != charges || events != charges {
		t.Errorf("after %d charges: %d SUCCEEDED payments, %d keys completed with them, %d events; want %d of each", charges, payments, completed, events, charges)
	}
	run("replay")
}
