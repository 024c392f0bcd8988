package repository

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

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
