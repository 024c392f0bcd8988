package repository

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"

	"gorm.io/gorm"
)

// ErrNotLeader: another replica holds the leader lock.
var ErrNotLeader = errors.New("another replica is the leader")

// LeaderLock elects one leader among the replicas that share a database,
// with a PostgreSQL session advisory lock. It implements gocron's Elector:
// only the leader runs scheduled jobs.
//
// A session advisory lock belongs to one connection, so the lock is taken
// and held on one connection pinned from the pool (a *sql.Conn), never on the
// pool itself, where the unlock could run on another connection and leave
// the lock held. The lock lives as long as that session: if the leader dies
// or its connection drops, PostgreSQL releases it and the next replica to ask
// becomes the leader.
//
// An elector, not a per-run lock: with a lock taken per run, a replica whose
// clock is a little late could take the lock after the first replica's run
// has finished and run the same firing again. The leader keeps the lock
// between runs, so each firing runs once. The jobs are safe to overlap all
// the same (conditional deletes, fenced claims), which is what makes the
// short window after a leader's connection drops harmless.
type LeaderLock struct {
	db  *sql.DB
	key int64

	mu   sync.Mutex
	conn *sql.Conn // non-nil while this replica is the leader
}

// NewLeaderLock returns an elector over db's pool for the lock key.
func NewLeaderLock(db *gorm.DB, key int64) (*LeaderLock, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	return &LeaderLock{db: sqlDB, key: key}, nil
}

// IsLeader returns nil if this replica is (or has just become) the leader,
// ErrNotLeader if another one is, or the database error.
func (l *LeaderLock) IsLeader(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// The lock lives exactly as long as the session: a live session
		// still holds it.
		if err := l.conn.PingContext(ctx); err == nil {
			return nil
		}
		discard(l.conn)
		l.conn = nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return mapError(fmt.Errorf("leader lock: %w", err))
	}
	var acquired bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", l.key).Scan(&acquired); err != nil {
		// The server may have granted the lock before the error.
		discard(conn)
		return mapError(fmt.Errorf("leader lock: %w", err))
	}
	if !acquired {
		_ = conn.Close()
		return ErrNotLeader
	}
	l.conn = conn
	return nil
}

// Close gives leadership up, so another replica can take over at once
// instead of when this connection is closed.
func (l *LeaderLock) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	var released bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", l.key).Scan(&released); err != nil {
		discard(conn)
		return mapError(fmt.Errorf("leader unlock: %w", err))
	}
	return conn.Close()
}

// discard closes conn for good instead of returning it to the pool: a
// connection whose session may still hold the lock must never be handed to
// other code, or the lock would stay held by whatever used it next. Returning
// driver.ErrBadConn from Raw is how database/sql is told to drop it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
