package repository

import (
	"database/sql"
	"io"
	"log/slog"
	"testing"

	"gorm.io/gorm"

	"github.com/example/payment-service/internal/testdb"
)

// openInternal is a new migrated database on the service's own
// connections (Open), at most conns of them, closed when t ends.
func openInternal(t *testing.T, conns int) (*gorm.DB, *sql.DB) {
	t.Helper()
	db, err := Open(testdb.New(t), PoolConfig{MaxOpenConns: conns}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	return db, sqlDB
}
