// Package migrations holds the versioned SQL schema, embedded in the binary
// and applied with goose. Never AutoMigrate: every schema change is a
// reviewed SQL file here, and each deviation from the style guide's tables
// is explained in a comment in the file that makes it.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

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
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// Newest is the version of the newest migration.
func Newest() (int64, error) {
	sources, err := fs.Glob(files, "*.sql")
	if err != nil || len(sources) == 0 {
		return 0, fmt.Errorf("no migrations embedded: %v", err)
	}
	// The names start with the zero-padded version, so the last in
	// lexical order is the newest.
	return goose.NumericComponent(sources[len(sources)-1])
}
