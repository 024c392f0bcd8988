package repository

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var updatePgbench = flag.Bool("update-pgbench", false, "rewrite pgbench/*.pgbench from the service's SQL")

// The benchmark's ceiling (cmd/bench-api) is pgbench running the service's
// own statements. The scripts are generated from the statement files the
// service embeds, and this test fails when a statement changes and its
// script does not:
//
//	go test ./internal/repository -run TestPgbenchScripts -update-pgbench
func TestPgbenchScriptsRunTheServicesStatements(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"charge.pgbench": chargeScript,
		"replay.pgbench": replayScript,
	} {
		path := filepath.Join("pgbench", name)
		if *updatePgbench {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path) //nolint:gosec // G304: the package's own pgbench scripts
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s no longer runs the service's statements; regenerate it with\n\tgo test ./internal/repository -run TestPgbenchScripts -update-pgbench", path)
		}
	}
}

var (
	sqlComment = regexp.MustCompile(`(?m)\s*--.*$`)
	namedParam = regexp.MustCompile(`@([a-z_]+)`)
)

// pgbenchSQL is a statement as pgbench runs it: comments dropped (pgbench
// would substitute variables inside them too), @name parameters as :name.
func pgbenchSQL(sql string) string {
	sql = sqlComment.ReplaceAllString(sql, "")
	return strings.TrimSpace(namedParam.ReplaceAllString(sql, ":$1"))
}

const pgbenchHeader = `-- Generated from internal/repository/statements/*.sql by
--   go test ./internal/repository -run TestPgbenchScripts -update-pgbench
-- Do not edit: the test fails when these differ from the service's SQL.
-- cmd/bench-api runs it with -M prepared and the -D variables it sets.
`

// chargeScript is a charge as the service makes it: phase 1
// (claimAndReserveSQL on its own, as the usual answer commits) and phase 3
// (recordOutcomeSQL). pgbench cannot make a UUID or count, so one SELECT
// more than the service makes draws the lock token, the event id and an
// order of its own (from a sequence cmd/bench-api creates): the ceiling pays
// one round trip that the service does not (its phase 1 reads the key).
var chargeScript = pgbenchHeader + `\set key random(1, 9223372036854775806)
\set atomic true
SELECT gen_random_uuid() AS token, gen_random_uuid() AS event_id, nextval('pgbench_order') AS "order" \gset
\set external :order
\set message_key :order
` + pgbenchSQL(claimAndReserveSQL) + ` \gset
` + untraced(pgbenchSQL(recordOutcomeSQL)) + `;
`

// untraced puts in the literal ” that an untraced request (tracing is off
// by default) sends as the trace context: pgbench cannot define an empty
// variable.
func untraced(sql string) string {
	return strings.Replace(sql, ":trace_context", "''", 1)
}

// replayScript is the one read a replay costs.
var replayScript = pgbenchHeader + `\set key random(:first_replay_key, :last_replay_key)
` + pgbenchSQL(lookupKeySQL) + `;
`
