package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"gorm.io/gorm"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// concurrentBuild finds each CREATE [UNIQUE] INDEX CONCURRENTLY statement of
// a migration's Up section: the index's name and the whole statement.
var concurrentBuild = regexp.MustCompile(`(?is)CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+ON\s+(\w+)[^;]*;`)

// A CREATE INDEX CONCURRENTLY that fails (a statement timeout, a lost
// connection, a deploy killed mid-way) leaves the index behind, marked
// invalid: PostgreSQL never uses it for reads, yet keeps updating it on
// every write. goose has not recorded the migration, so the next start runs
// it again. That rerun must build a valid index: with IF NOT EXISTS it
// would keep the invalid one and record the migration as applied; with
// neither IF NOT EXISTS nor a DROP first it would fail on every start.
//
// For every migration that builds an index CONCURRENTLY, this makes the
// build fail for real (it waits for a transaction that holds the table, and
// its statement timeout ends it after the invalid index exists), then runs
// the migration and requires every index to be valid.
func TestAConcurrentIndexBuildThatFailedIsBuiltAgain(t *testing.T) {
	files, err := filepath.Glob("*.sql")
	if err != nil {
		t.Fatal(err)
	}
	tested := 0
	for _, file := range files {
		version, up := upSection(t, file)
		builds := concurrentBuild.FindAllStringSubmatch(up, -1)
		if len(builds) == 0 {
			continue
		}
		for i, b := range builds {
			tested++
			t.Run(fmt.Sprintf("%s/%s", file, b[1]), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				dsn := testdb.New(t)
				db, p := openProvider(t, dsn)
				if _, err := p.DownTo(ctx, version-1); err != nil {
					t.Fatalf("down to %d: %v", version-1, err)
				}
				// A run that failed at this build had run what comes before
				// it, the earlier builds included (a column its index reads
				// may be added just before it).
				runStatements(ctx, t, db, up[:buildAt(up, builds, i)])
				leaveInvalidIndex(ctx, t, dsn, b[2], b[0])
				if !exists(ctx, t, db, b[1]) {
					t.Fatalf("the failed build of %s left no index behind: the test did not set up the failure", b[1])
				}

				if _, err := p.UpTo(ctx, version); err != nil {
					t.Fatalf("running %s again after a failed build of %s: %v", file, b[1], err)
				}
				if exists(ctx, t, db, b[1]) { // not dropped or renamed by the migration itself
					var valid bool
					if err := db.QueryRowContext(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, b[1]).Scan(&valid); err != nil {
						t.Fatal(err)
					}
					if !valid {
						t.Errorf("%s: index %s is still invalid after the migration ran again", file, b[1])
					}
				}
				var invalid int
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_index WHERE NOT indisvalid`).Scan(&invalid); err != nil {
					t.Fatal(err)
				}
				if invalid != 0 {
					t.Errorf("%s: %d invalid indexes after the migration ran again", file, invalid)
				}
				if _, err := p.Up(ctx); err != nil {
					t.Fatalf("the migrations after %s: %v", file, err)
				}
			})
		}
	}
	if tested == 0 {
		t.Fatal("no migration builds an index CONCURRENTLY: the pattern no longer matches the files")
	}
}

// openProvider opens the database at dsn, closed when the test ends, and
// a goose provider over it.
func openProvider(t *testing.T, dsn string) (*sql.DB, *goose.Provider) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p, err := migrations.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	return db, p
}

// openRepository opens the database at dsn as the service does, closed
// when the test ends: to run the service's own statements on a schema.
func openRepository(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	gdb, err := repository.Open(dsn, repository.PoolConfig{MaxOpenConns: 4}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := gdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return gdb
}

// upSection returns a migration's version and the text of its Up section.
func upSection(t *testing.T, file string) (int64, string) {
	t.Helper()
	version, err := strconv.ParseInt(strings.SplitN(file, "_", 2)[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: no version in the name: %v", file, err)
	}
	b, err := os.ReadFile(file) //nolint:gosec // G304: a migration of this directory
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	_, up, ok := strings.Cut(text, "-- +goose Up")
	if !ok {
		t.Fatalf("%s: no Up section", file)
	}
	up, _, _ = strings.Cut(up, "-- +goose Down")
	return version, up
}

// runStatements runs the SQL statements of text, a part of a migration,
// one at a time (DROP INDEX CONCURRENTLY may not share a transaction with
// another statement); a block between goose's StatementBegin and
// StatementEnd is one statement, as goose runs it.
func runStatements(ctx context.Context, t *testing.T, db *sql.DB, text string) {
	t.Helper()
	for text != "" {
		plain, rest, block := strings.Cut(text, "-- +goose StatementBegin")
		for _, stmt := range strings.Split(withoutComments(plain), ";") {
			run(ctx, t, db, stmt)
		}
		if !block {
			return
		}
		body, after, ok := strings.Cut(rest, "-- +goose StatementEnd")
		if !ok {
			t.Fatal("a StatementBegin with no StatementEnd")
		}
		run(ctx, t, db, body)
		text = after
	}
}

// withoutComments is text without its comment lines (a comment may hold a
// semicolon).
func withoutComments(text string) string {
	var code []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			code = append(code, line)
		}
	}
	return strings.Join(code, "\n")
}

// run runs one statement, its comment lines left out.
func run(ctx context.Context, t *testing.T, db *sql.DB, stmt string) {
	t.Helper()
	if sql := strings.TrimSpace(withoutComments(stmt)); sql != "" {
		if _, err := db.ExecContext(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// buildAt is where the i-th build of builds starts in up.
func buildAt(up string, builds [][]string, i int) int {
	from := 0
	for j := 0; j < i; j++ {
		from += strings.Index(up[from:], builds[j][0]) + len(builds[j][0])
	}
	return from + strings.Index(up[from:], builds[i][0])
}

// leaveInvalidIndex runs build so that it fails after creating its index:
// another transaction holds a lock on the table that the build's wait for
// older writers cannot get past, and the build's statement timeout ends it.
func leaveInvalidIndex(ctx context.Context, t *testing.T, dsn, table, build string) {
	t.Helper()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// ROW EXCLUSIVE (what any INSERT takes) lets the build register its
	// index, then holds up the build's wait for writers.
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	builder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer builder.Close(context.Background())
	if _, err := builder.Exec(ctx, "SET statement_timeout = '500ms'"); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Exec(ctx, build); err == nil || !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("the build was meant to time out waiting for the lock holder; got %v", fmt.Sprint(err))
	}
}

func exists(ctx context.Context, t *testing.T, db *sql.DB, index string) bool {
	t.Helper()
	var found bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, index).Scan(&found); err != nil {
		t.Fatal(err)
	}
	return found
}
