package repository

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"
)

// A statement answers alike on the pool (pgx) and in a transaction
// (*sql.Tx), whichever of the three ways it runs: queryRow its row,
// sql.ErrNoRows, and an end when its context ends, after which the pool's
// next statement runs; queryRows each row in order, and an error of the
// caller's ends it; exec the rows it touched.
func TestStatementsOnThePoolAndInATransaction(t *testing.T) {
	pool, _ := openInternal(t, 1)
	next, none, sleep := compileNamed(`SELECT @n::int + 1`), compileNamed(`SELECT 1 WHERE false`), compileNamed(`SELECT pg_sleep(@seconds)::text`)
	series := compileNamed(`SELECT g FROM generate_series(1, @n::int) g`)

	for _, where := range []struct {
		name  string
		run   func(fn func(db *gorm.DB) error) error
		onPgx bool // the statement is a pgxRow
	}{
		{"pool", func(fn func(db *gorm.DB) error) error { return fn(pool) }, true},
		{"transaction", func(fn func(db *gorm.DB) error) error { return pool.Transaction(fn) }, false},
	} {
		t.Run(where.name, func(t *testing.T) {
			// scan runs q with values where the case says, and scans its
			// one column into dest.
			scan := func(ctx context.Context, q namedSQL, values map[string]any, dest any) error {
				return where.run(func(db *gorm.DB) error {
					r, err := queryRow(ctx, db, q, values)
					if err != nil {
						return err
					}
					if _, onPgx := r.(pgxRow); onPgx != where.onPgx {
						t.Errorf("the statement is a %T; want a pgxRow: %v", r, where.onPgx)
					}
					return r.Scan(dest)
				})
			}
			ctx := context.Background()
			var got int
			if err := scan(ctx, next, map[string]any{"n": 41}, &got); err != nil || got != 42 {
				t.Fatalf("@n + 1 with n = 41: %d, %v; want 42", got, err)
			}

			if err := scan(ctx, none, nil, &got); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("no row: %v, want sql.ErrNoRows", err)
			}

			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			var slept string
			if err := scan(short, sleep, map[string]any{"seconds": 30}, &slept); err == nil || time.Since(start) > 10*time.Second {
				t.Fatalf("pg_sleep(30) with 200 ms to run: %v after %s; want an error within seconds", err, time.Since(start))
			}

			var each []int
			err := where.run(func(db *gorm.DB) error {
				return queryRows(ctx, db, series, map[string]any{"n": 3}, func(r row) error {
					var v int
					err := r.Scan(&v)
					each = append(each, v)
					return err
				})
			})
			if err != nil || !slices.Equal(each, []int{1, 2, 3}) {
				t.Fatalf("queryRows of 1 to 3: %v, %v", each, err)
			}
			stop := errors.New("enough")
			err = where.run(func(db *gorm.DB) error {
				return queryRows(ctx, db, series, map[string]any{"n": 3}, func(row) error { return stop })
			})
			if !errors.Is(err, stop) {
				t.Fatalf("queryRows whose caller stops: %v, want its error", err)
			}

			var touched int64
			err = where.run(func(db *gorm.DB) (err error) {
				touched, err = exec(ctx, db, series, map[string]any{"n": 4})
				return err
			})
			if err != nil || touched != 4 {
				t.Fatalf("exec of 1 to 4: %d rows, %v; want 4", touched, err)
			}

			got = 0
			r, err := queryRow(ctx, pool, next, map[string]any{"n": 1})
			if err == nil {
				err = r.Scan(&got)
			}
			if err != nil || got != 2 {
				t.Fatalf("the pool's next statement: %d, %v; want 2", got, err)
			}
		})
	}
}
