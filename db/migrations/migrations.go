// Package migrations holds the versioned SQL schema, embedded in the binary
// and applied with goose. Never AutoMigrate: every schema change is a
// reviewed SQL file here, and each deviation from the style guide's tables
// is explained in a comment in the file that makes it.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// NewProvider returns a goose provider over the embedded files. It takes a
// PostgreSQL advisory lock for the duration of a run, so replicas that all
// migrate on start apply each migration once, one after another.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	return goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
}

// Up applies every pending migration to the database at dsn.
func Up(ctx context.Context, dsn string) error { return UpTo(ctx, dsn, goose.MaxVersion) }

// UpTo applies the pending migrations up to version to the database at
// dsn: the benchmark measures a migration by stopping just before it, and
// the fault suite starts the previous release on the schema it was
// deployed with and migrates the rest under it (docs/deploying.md).
func UpTo(ctx context.Context, dsn string, version int64) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	stop := unblockConcurrentIndexBuilds(ctx, db)
	_, err = p.UpTo(ctx, version)
	stop()
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// cancelAdvisoryWaitsSQL cancels every wait for an advisory lock in this
// database, but only while a CREATE INDEX CONCURRENTLY waits.
//
// Such a build waits for every transaction whose snapshot is older than
// its own, and an outbox relay standby of the previous release sits in one
// statement, SELECT pg_advisory_lock(...), holding one snapshot, for as
// long as the leader's session lives (this release's standby asks with
// pg_try_advisory_lock and holds none: internal/repository/outbox.go).
// With two replicas or more running, the build, and so the migration and
// the deploy, waited for ever: the rolling-deploy test
// found it (docs/deploying.md). A cancelled wait fails the standby's Lead;
// its relay competes again after a short backoff, with a fresh snapshot
// that the build does not wait for. Nothing else waits on an advisory lock
// here: the jobs' leader, goose's own lock and this release's relay take
// theirs with pg_try_advisory_lock.
const cancelAdvisoryWaitsSQL = `
SELECT count(pg_cancel_backend(l.pid))
  FROM pg_locks l
 WHERE l.locktype = 'advisory' AND NOT l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND EXISTS (SELECT 1 FROM pg_stat_activity a
                WHERE a.datname = current_database()
                  AND a.wait_event = 'virtualxid'
                  AND a.query ILIKE '%CREATE%INDEX%CONCURRENTLY%')`

// unblockConcurrentIndexBuilds runs cancelAdvisoryWaitsSQL every half
// second until the returned stop is called; stop waits for it to end.
func unblockConcurrentIndexBuilds(ctx context.Context, db *sql.DB) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// An error (the database restarting, say) is the
				// migration's to report; this only retries.
				var cancelled int
				_ = db.QueryRowContext(ctx, cancelAdvisoryWaitsSQL).Scan(&cancelled)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// Newest is the version of the newest migration.
func Newest() (int64, error) {
	sources, err := fs.Glob(files, "*.sql")
	if err != nil {
		return 0, fmt.Errorf("no migrations embedded: %w", err)
	}
	if len(sources) == 0 {
		return 0, errors.New("no migrations embedded")
	}
	// The names start with the zero-padded version, so the last in
	// lexical order is the newest.
	return goose.NumericComponent(sources[len(sources)-1])
}
