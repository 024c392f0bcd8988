// Package repository is the PostgreSQL adapter: it implements the ports of
// internal/app. It is the only package that sees *gorm.DB; its row structs
// map to and from domain types here, and database errors are mapped to
// domain and app errors here, once.
//
// GORM, with its postgres driver over pgx, owns the connection pool and
// opens every transaction (Transactor.Transact, the one way to open one).
// It builds no statement: every statement is hand-written SQL with @name
// parameters (namedSQL: a file in statements/ or a constant beside its Go)
// and runs in one way, queryRow, queryRows or exec (below), on a
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
// (outbox.go), and the jobs' leader lock (leader.go).
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
	"strconv"
	"strings"
	"sync"
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

// Gate lets at most n callers use the connection pool at once and queues
// the others in the order they came.
//
// database/sql hands a freed connection to a random waiter (its
// connRequestSet.TakeRandom). Under saturation, more charges in flight
// than connections, that makes the wait a lottery: most requests get a
// connection at once and a few wait turn after turn, and the p99 runs away
// from the p50. Waiting here instead, where goroutines blocked on a channel
// are served first come first served, makes every request wait its turn
// once. The gate's size is the pool's, so the pool itself never has a
// waiter. A nil *Gate lets everyone through.
type Gate struct {
	slots chan struct{}
}

// NewGate returns a gate for a pool of n connections.
func NewGate(n int) *Gate {
	return &Gate{slots: make(chan struct{}, n)}
}

// enter waits for a slot, or until ctx ends (ErrStoreUnavailable then: the
// database did not answer in time, as far as the caller can tell).
func (g *Gate) enter(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return mapError(fmt.Errorf("waiting for a database connection: %w", ctx.Err()))
	}
}

// leave gives the slot back.
func (g *Gate) leave() {
	if g != nil {
		<-g.slots
	}
}

// namedSQL is a statement written with @name parameters, as every
// statement of the repository is (statements/*.sql, and the constants
// beside the Go that runs them), compiled once to PostgreSQL's $n
// placeholders. It runs in one way, whatever it returns: queryRow (its one
// row), queryRows (each row) or exec (the rows it changed), on db's
// connection (db.go says which is whose).
//
// The statements go to GORM's connection pool (Statement.ConnPool: the
// *sql.DB, or the *sql.Tx inside Transact) as they are, never through
// GORM's statement builder: they are hand-written SQL, which the builder
// only parses again on every call (the profile of a replay put it at about
// a third of the lookup's time), and hand-written SQL is what a reader
// checks against the plans and the locks.
type namedSQL struct {
	text  string   // with $1, $2, ...
	names []string // the parameter of each $n
}

// compileNamed numbers the parameters in order of first use; a name used
// twice is one parameter. An @name in a comment or a string literal is
// text, not a parameter: the statements' comments name their parameters.
// A statement that is nothing but comments and spaces (an empty file)
// panics, at package initialisation.
func compileNamed(sql string) namedSQL {
	q := namedSQL{}
	index := map[string]int{}
	var b strings.Builder
	code := false // the statement has something outside comments
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				end = len(sql) - i
			}
			b.WriteString(sql[i : i+end])
			i += end
		case c == '\'':
			end := i + 1
			for end < len(sql) && sql[end] != '\'' {
				end++
			}
			// A doubled quote inside the literal is two literals side by
			// side here, which leaves the same text.
			end = min(end+1, len(sql))
			b.WriteString(sql[i:end])
			i, code = end, true
		case c == '@' && i+1 < len(sql) && isNameByte(sql[i+1]):
			end := i + 1
			for end < len(sql) && isNameByte(sql[end]) {
				end++
			}
			name := sql[i+1 : end]
			n, ok := index[name]
			if !ok {
				q.names = append(q.names, name)
				n = len(q.names)
				index[name] = n
			}
			b.WriteString("$" + strconv.Itoa(n))
			i, code = end, true
		default:
			b.WriteByte(c)
			i++
			code = code || !isSpace(c)
		}
	}
	if !code {
		panic(fmt.Sprintf("an empty statement: %q", sql))
	}
	q.text = b.String()
	return q
}

// isNameByte: a parameter's name is lower-case letters and underscores.
func isNameByte(c byte) bool { return c >= 'a' && c <= 'z' || c == '_' }

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// args orders values by parameter number. A missing value is a mistake in
// the code calling the statement, reported as an error, never sent as NULL.
func (q namedSQL) args(values map[string]any) ([]any, error) {
	out := make([]any, len(q.names))
	for i, name := range q.names {
		v, ok := values[name]
		if !ok {
			return nil, fmt.Errorf("statement parameter @%s has no value", name)
		}
		out[i] = v
	}
	return out, nil
}

// row is the one row of a statement's answer, or one of its rows.
type row interface{ Scan(dest ...any) error }

// queryRow runs q on db's connection for its one row: inside Transact the
// transaction's, otherwise one of the pool's, spoken to by pgx (pgxRow).
// Both end the statement when ctx ends, but database/sql starts a
// goroutine a statement to watch ctx where pgx registers a callback:
// measured on the hot path's two statements a charge, pgx's way takes
// about 5 % less of the service's CPU a charge (decision 0033;
// docs/benchmarks.md, "The hot path per statement"). No row:
// sql.ErrNoRows from Scan.
func queryRow(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (row, error) {
	args, err := q.args(values)
	if err != nil {
		return nil, err
	}
	if pool, ok := db.Statement.ConnPool.(*sql.DB); ok {
		return pgxRow{ctx: ctx, pool: pool, text: q.text, args: args}, nil
	}
	return db.Statement.ConnPool.QueryRowContext(ctx, q.text, args...), nil
}

// queryRows runs q as queryRow does and hands each row of its answer to
// each, in order; an error from each ends the statement.
func queryRows(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any, each func(row) error) error {
	args, err := q.args(values)
	if err != nil {
		return err
	}
	if pool, ok := db.Statement.ConnPool.(*sql.DB); ok {
		return onPgx(ctx, pool, func(c *pgx.Conn) error {
			rows, err := c.Query(ctx, q.text, args...) //nolint:rowserrcheck // eachRow returns rows.Err()
			if err != nil {
				return err
			}
			defer rows.Close()
			return eachRow(rows, each)
		})
	}
	rows, err := db.Statement.ConnPool.QueryContext(ctx, q.text, args...) //nolint:rowserrcheck // eachRow returns rows.Err()
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	return eachRow(rows, each)
}

// rowsOf are a statement's rows as pgx and database/sql both give them.
type rowsOf interface {
	row
	Next() bool
	Err() error
}

func eachRow(rows rowsOf, each func(row) error) error {
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// exec runs q as queryRow does, for the number of rows it changed.
func exec(ctx context.Context, db *gorm.DB, q namedSQL, values map[string]any) (int64, error) {
	args, err := q.args(values)
	if err != nil {
		return 0, err
	}
	if pool, ok := db.Statement.ConnPool.(*sql.DB); ok {
		var changed int64
		err := onPgx(ctx, pool, func(c *pgx.Conn) error {
			tag, err := c.Exec(ctx, q.text, args...)
			changed = tag.RowsAffected()
			return err
		})
		return changed, err
	}
	res, err := db.Statement.ConnPool.ExecContext(ctx, q.text, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// pgxRow runs its statement when it is scanned (onPgx).
type pgxRow struct {
	ctx  context.Context
	pool *sql.DB
	text string
	args []any
}

func (r pgxRow) Scan(dest ...any) error {
	return onPgx(r.ctx, r.pool, func(c *pgx.Conn) error {
		return c.QueryRow(r.ctx, r.text, r.args...).Scan(dest...)
	})
}

// onPgx runs fn on a connection of pool taken for one statement alone.
// database/sql still keeps the pool: it checks the connection before
// handing it out (a broken one is replaced, as for its own statements) and
// discards it when pgx has closed it.
func onPgx(ctx context.Context, pool *sql.DB, fn func(*pgx.Conn) error) error {
	c, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	return c.Raw(func(driverConn any) error {
		conn := driverConn.(*stdlib.Conn).Conn()
		takeLocalOnly(conn.PgConn())
		if err := fn(conn); err != nil {
			return err
		}
		// Each statement here commits on its own: a commit answered
		// with the warning that its standby wait was cancelled is not done.
		if takeLocalOnly(conn.PgConn()) {
			return errCommittedLocallyOnly
		}
		return nil
	})
}

// errCommittedLocallyOnly: a commit waited for the synchronous standby and
// the wait was cancelled. PostgreSQL then answers the commit as done, with
// only a warning, though the standby may not have it: a failover to the
// standby takes it away. Its outcome is unknown, so the statement fails as
// the database being unavailable (503, the client retries, the key's
// record or the completer tells what happened), never as done.
var errCommittedLocallyOnly = errors.New("the commit was cancelled while it waited for the synchronous standby: " +
	"committed on the primary only, its outcome unknown")

// committedLocallyOnly holds the connections on which such a warning came,
// until the statement that got it looks (takeLocalOnly). A warning is rare
// (an operator's pg_cancel_backend, a pooler forwarding a cancel), so the
// set is nearly always empty.
var committedLocallyOnly sync.Map // *pgconn.PgConn -> struct{}

// noteLocalOnlyCommit is the pool's OnNotice: it marks the connection when
// the notice is PostgreSQL's warning that a commit's wait for the
// synchronous standby was cancelled. It runs on the goroutine that runs the
// statement, before the statement returns.
func noteLocalOnlyCommit(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "wait for synchronous replication") && strings.Contains(n.Detail, "committed locally") {
		committedLocallyOnly.Store(c, struct{}{})
	}
}

// takeLocalOnly reports (and forgets) whether a commit on c was answered
// with that warning since the last look.
func takeLocalOnly(c *pgconn.PgConn) bool {
	_, ok := committedLocallyOnly.LoadAndDelete(c)
	return ok
}
