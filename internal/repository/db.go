// Package repository is the PostgreSQL adapter: it implements the ports of
// internal/app. It is the only package that sees *gorm.DB; its row structs
// map to and from domain types here, and database errors are mapped to
// domain and app errors here, once.
//
// GORM, with its postgres driver over pgx, owns the connection pool and
// opens every transaction (Transactor.Transact, the one way to open one).
// It builds no statement: every statement is hand-written SQL with @name
// parameters (namedSQL: a file in statements/ or a constant beside its Go)
// and runs in one way, queryRow, queryRows or exec (namedsql.go), on a
// conn's *gorm.DB:
//
//   - on the pool (Transactor.AutoCommit, and the jobs' Retention): each
//     statement is its own transaction, committed by PostgreSQL when it
//     ends, on a connection of the pool taken for it alone and spoken to
//     by pgx directly. Phase 1's claim and phase 3's record of every
//     command run so, each atomic as one statement; a conn's statements
//     wait their turn at the gate first;
//   - inside Transact: on the transaction's connection (database/sql's
//     *sql.Tx), READ COMMITTED: phase 1's rare answers, a provider's event,
//     a batch of order events, a saga step's answer stored with no claim,
//     and reads that must agree (a payment and its refunds).
//
// Two sessions are held apart from the pool, each for a session-level
// advisory lock: the outbox relay's own pgx connection, which also LISTENs
// (outbox_relay.go), and the jobs' leader lock (leader.go).
package repository

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/example/payment-service/internal/app"
)

// PoolConfig sizes the connection pool.
type PoolConfig struct {
	// MaxOpenConns caps the pool (DATABASE_MAX_CONNS); 0 leaves
	// database/sql's default. The Gate in front of it has the same size.
	MaxOpenConns int
	// ConnMaxLifetime retires a connection after this long; 0 never.
	ConnMaxLifetime time.Duration
}

// OpenOption configures Open.
type OpenOption func(*pgx.ConnConfig)

// WithQueryTracer has every statement, transaction command and connect of
// the pool reported to tracer (the service passes otelpgx's when tracing is
// on: one span per statement, a child of the request's span).
func WithQueryTracer(tracer pgx.QueryTracer) OpenOption {
	return func(c *pgx.ConnConfig) { c.Tracer = tracer }
}

// poolSettings are sent with the start-up of every connection of the
// service's pool (decision 0017). A setting the DATABASE_URL names
// (?enable_seqscan=on) is the operator's, and wins.
//
// enable_seqscan=off: every statement of the service finds its rows by an
// index, and none of them may scan payment or idempotency_record in full.
// pgx prepares every statement, and after five executions PostgreSQL keeps
// a generic plan made from the statistics of that moment, until the next
// ANALYZE of a table it reads. On a new or restored database whose
// near-empty tables had been analyzed, that plan was a sequential scan
// (cheapest for a page or two), in the hot UPDATEs and in the foreign key
// check of idempotency_record.payment_id, and each pooled connection kept
// it while the tables grew, until autovacuum analyzed them about a minute
// later. With the setting off, the planner takes the index even for a tiny
// table, and the generic plan stays right as the table grows. It is a cost
// penalty, not a ban: a statement with no index to use still scans.
// plan_cache_mode=force_custom_plan would replan each execution instead;
// measured, that costs PostgreSQL over a millisecond more CPU per charge,
// on every charge (docs/benchmarks.md, "Cold start").
var poolSettings = map[string]string{
	"enable_seqscan": "off",
}

// Open connects to PostgreSQL. It does not wait for the database to be up:
// the service starts and reports not-ready until it is.
func Open(dsn string, pool PoolConfig, log *slog.Logger, opts ...OpenOption) (*gorm.DB, error) {
	// The same pgx driver that postgres.Open would use, with the
	// connection configuration in our hands.
	connConfig, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	for name, value := range poolSettings {
		if _, set := connConfig.RuntimeParams[name]; !set {
			connConfig.RuntimeParams[name] = value
		}
	}
	for _, opt := range opts {
		opt(connConfig)
	}
	connConfig.OnNotice = noteLocalOnlyCommit
	dialector := postgres.New(postgres.Config{Conn: stdlib.OpenDB(*connConfig)})
	db, err := gorm.Open(dialector, &gorm.Config{
		// GORM runs no statement of its own here (package doc); should one
		// ever be added, it must not be wrapped in a transaction of GORM's,
		// which would only add round trips.
		SkipDefaultTransaction: true,
		// Start even when the database is down: /readyz reports it, and
		// requests fail closed with 503 until it is back.
		DisableAutomaticPing: true,
		Logger:               sqlLogger{log: log, slow: 500 * time.Millisecond},
	})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if pool.MaxOpenConns > 0 {
		sqlDB.SetMaxOpenConns(pool.MaxOpenConns)
		sqlDB.SetMaxIdleConns(pool.MaxOpenConns)
	}
	if pool.ConnMaxLifetime > 0 {
		sqlDB.SetConnMaxLifetime(pool.ConnMaxLifetime)
	}
	return db, nil
}

// Ping checks that the database answers, for the readiness probe.
func Ping(ctx context.Context, db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return mapError(sqlDB.PingContext(ctx))
}

// Transactor implements app.Transactor over one *gorm.DB.
type Transactor struct {
	db     *gorm.DB
	outbox OutboxConfig
	gate   *Gate
	pool   app.Repos // the repositories on the pool (AutoCommit)
}

// NewTransactor returns the transaction provider the use cases run in.
func NewTransactor(db *gorm.DB, opts ...TransactorOption) *Transactor {
	t := &Transactor{db: db, outbox: OutboxConfig{PaymentEventsTopic: DefaultPaymentEventsTopic, RepliesTopic: DefaultPaymentRepliesTopic}}
	for _, opt := range opts {
		opt(t)
	}
	t.pool = repos(conn{db: t.db, gate: t.gate, outbox: t.outbox})
	return t
}

// TransactorOption configures a Transactor.
type TransactorOption func(*Transactor)

// WithOutbox sets where the outbox rows written in transactions go.
func WithOutbox(cfg OutboxConfig) TransactorOption {
	return func(t *Transactor) { t.outbox = cfg }
}

// WithGate makes every transaction wait its turn at g for a connection.
func WithGate(g *Gate) TransactorOption {
	return func(t *Transactor) { t.gate = g }
}

// AutoCommit implements app.Transactor: the repositories on the pool,
// each statement waiting its turn at the gate and committing on its own.
// They are built once: every phase of every request asks for them.
func (t *Transactor) AutoCommit() app.Repos {
	return t.pool
}

// Transact runs fn in one READ COMMITTED transaction, the only way the
// repository opens one: the repositories fn gets run every statement on the
// transaction's connection. The statements that need more than READ
// COMMITTED (the key claim, the reservations) are single INSERT ... ON
// CONFLICT statements, atomic on their own.
func (t *Transactor) Transact(ctx context.Context, fn func(ctx context.Context, r app.Repos) error) error {
	if err := t.gate.enter(ctx); err != nil {
		return err
	}
	defer t.gate.leave()
	var wroteOutbox bool
	outbox := t.outbox
	outbox.wroteInTx = &wroteOutbox
	// The transaction runs on a connection pinned for it, so that its
	// commit can be asked afterwards whether it was answered with the
	// warning that its wait for the synchronous standby was cancelled.
	err := t.db.WithContext(ctx).Connection(func(pinned *gorm.DB) error {
		sqlConn, _ := pinned.Statement.ConnPool.(*sql.Conn)
		_ = rawPgConn(sqlConn, takeLocalOnly)
		err := pinned.Transaction(func(tx *gorm.DB) error {
			// No gate: the transaction already holds its connection.
			return fn(ctx, repos(conn{db: tx, outbox: outbox, inTx: true}))
		})
		if err == nil && rawPgConn(sqlConn, takeLocalOnly) {
			err = errCommittedLocallyOnly
		}
		return err
	})
	if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		// database/sql rolls a transaction back by itself when its context
		// ends, and then reports the commit (or the next statement) as
		// ErrTxDone. That is the deadline: nothing was committed, and the
		// caller must see it as one (503), not as an unmapped error (500).
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err == nil && wroteOutbox {
		t.outbox.wrote()
	}
	return mapError(err)
}

// rawPgConn hands the pgx connection under c to f; false where there is
// none (c nil, or not pgx's).
func rawPgConn(c *sql.Conn, f func(*pgconn.PgConn) bool) bool {
	if c == nil {
		return false
	}
	var got bool
	_ = c.Raw(func(driverConn any) error {
		if dc, ok := driverConn.(*stdlib.Conn); ok {
			got = f(dc.Conn().PgConn())
		}
		return nil
	})
	return got
}

// repos are the repositories over c.
func repos(c conn) app.Repos {
	return app.Repos{
		Keys:            &Keys{c},
		Charges:         &ChargeStore{c},
		Refunds:         &RefundStore{c},
		Orders:          &OrderStore{c},
		ProcessedEvents: &ProcessedEvents{c},
		ProviderReports: &ProviderReports{c},
		Sagas:           &SagaStore{c},
		Outbox:          &Outbox{c},
		Transitions:     &TransitionStore{c},
	}
}

// conn is where a repository's statements run: on the pool, where each
// statement waits its turn at the gate and commits on its own, or on one
// transaction's connection (no gate: the transaction holds its turn).
type conn struct {
	db     *gorm.DB
	gate   *Gate
	outbox OutboxConfig
	inTx   bool
}

// run runs fn on c's connection, in its turn at the gate.
func (c conn) run(ctx context.Context, fn func(db *gorm.DB) error) error {
	if err := c.gate.enter(ctx); err != nil {
		return err
	}
	defer c.gate.leave()
	return mapError(fn(c.db))
}

// mapError turns errors meaning "the database cannot be reached" into
// app.ErrStoreUnavailable (the service fails closed on it with 503), marks
// errors that reject the data itself with app.ErrDataRejected (keeping the
// original in the chain), turns claim_needs_transaction's error into
// app.ErrClaimNeedsTransaction, and leaves others as they are. It is
// idempotent.
func mapError(err error) error {
	if err == nil || errors.Is(err, app.ErrStoreUnavailable) || errors.Is(err, app.ErrDataRejected) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == claimNeedsTransactionCode {
		return app.ErrClaimNeedsTransaction
	}
	if isUnavailable(err) {
		return fmt.Errorf("%w: %w", app.ErrStoreUnavailable, err)
	}
	if isDataRejected(err) {
		return fmt.Errorf("%w: %w", app.ErrDataRejected, err)
	}
	return err
}

// isDataRejected: SQLSTATE class 22 (data exception: out of range, invalid
// value) and class 23 (integrity constraint violation). Every other class is
// about the system or the code (connection, resources, locks, a missing
// table or privilege) and may pass without the data changing.
func isDataRejected(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
}

func isUnavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, cannot connect now
			return true
		case pgErr.Code == "53300": // too many connections
			return true
		case pgErr.Code == "25006": // read-only transaction: a standby, or a primary being demoted
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) ||
		errors.As(err, &netErr) ||
		errors.Is(err, driver.ErrBadConn) ||
		// The connection ended in the middle of a statement: the server
		// crashed or was shut down immediately.
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, errCommittedLocallyOnly) ||
		pgconn.SafeToRetry(err) ||
		pgconn.Timeout(err)
}
