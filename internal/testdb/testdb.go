// Package testdb gives each test its own freshly migrated PostgreSQL
// database on a real server.
//
// A test binary calls Main from TestMain. Main starts a throwaway cluster
// (internal/pgtemp) unless DATABASE_URL names a server to use, migrates one
// template database, and then every New(t) is a cheap
// `CREATE DATABASE ... TEMPLATE`, so tests run isolated and in parallel
// without re-running migrations.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/pgtemp"
)

var (
	mu       sync.Mutex
	adminDSN string // a database on the server with CREATEDB rights
	template string // migrated template database name
)

// Main runs the package's tests against a real PostgreSQL server and exits.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := os.Getenv("DATABASE_URL")
	if admin == "" {
		cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "testdb:", err)
			return 1
		}
		defer cluster.Stop()
		admin = cluster.DSN("postgres")
	}

	name := "tmpl_" + randomSuffix()
	if err := exec(ctx, admin, "CREATE DATABASE "+name); err != nil {
		fmt.Fprintln(os.Stderr, "testdb: create template:", err)
		return 1
	}
	defer func() { _ = exec(context.Background(), admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") }()
	if err := migrations.Up(ctx, withDatabase(admin, name)); err != nil {
		fmt.Fprintln(os.Stderr, "testdb: migrate template:", err)
		return 1
	}

	mu.Lock()
	adminDSN, template = admin, name
	mu.Unlock()
	return m.Run()
}

// New creates a database cloned from the migrated template, drops it when
// the test ends, and returns its connection URL.
func New(t testing.TB) string {
	t.Helper()
	mu.Lock()
	admin, tmpl := adminDSN, template
	mu.Unlock()
	if admin == "" {
		t.Fatal("testdb.New needs testdb.Main in the package's TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "t_" + randomSuffix()
	if err := exec(ctx, admin, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		// FORCE ends connections a test forgot; the data is thrown away.
		if err := exec(context.Background(), admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database: %v", err)
		}
	})
	return withDatabase(admin, name)
}

// AdminDSN returns the server's admin connection URL, for tests that need
// to act on the server itself.
func AdminDSN() string {
	mu.Lock()
	defer mu.Unlock()
	return adminDSN
}

// WhileLocked runs fn while another connection to dsn holds table locked
// (ACCESS EXCLUSIVE, in a transaction rolled back after fn), so that every
// statement of fn that touches the table waits for the lock.
func WhileLocked(t testing.TB, dsn, table string, fn func() error) error {
	t.Helper()
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("testdb: lock %s: %v", table, err)
	}
	defer func() { _ = holder.Close(ctx) }()
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatalf("testdb: lock %s: %v", table, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatalf("testdb: lock %s: %v", table, err)
	}
	return fn()
}

func exec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn with its database replaced. Both URL and
// keyword/value forms are accepted, since DATABASE_URL may be either.
func withDatabase(dsn, database string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + database
		return u.String()
	}
	fields := strings.Fields(dsn)
	out := fields[:0]
	for _, f := range fields {
		if !strings.HasPrefix(f, "dbname=") {
			out = append(out, f)
		}
	}
	return strings.Join(append(out, "dbname="+database), " ")
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
