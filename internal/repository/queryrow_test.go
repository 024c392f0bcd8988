package repository

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"
)

// A statement answers alike on the pool (pgxRow) and in a transaction
// (*sql.Row): its row, sql.ErrNoRows, and an end when its context ends,
// after which the pool's next statement runs.
func TestQueryRowOnThePoolAndInATransaction(t *testing.T) {
	db, _ := openInternal(t, 1)
	ctx := context.Background()
	next, none, sleep := compileNamed(`SELECT @n::int + 1`), compileNamed(`SELECT 1 WHERE false`), compileNamed(`SELECT pg_sleep(@seconds)::text`)

	for _, where := range []struct {
		name string
		run  func(fn func(db *gorm.DB) error) error
	}{
		{"pool", func(fn func(db *gorm.DB) error) error { return fn(db) }},
		{"transaction", func(fn func(db *gorm.DB) error) error { return db.Transaction(fn) }},
	} {
		t.Run(where.name, func(t *testing.T) {
			if where.name == "pool" {
				if r, _ := queryRow(ctx, db, next, map[string]any{"n": 1}); r == nil {
					t.Fatal("no row")
				} else if _, ok := r.(pgxRow); !ok {
					t.Fatalf("a statement on the pool is a %T, want pgxRow", r)
				}
			}
			var got int
			err := where.run(func(db *gorm.DB) error {
				r, err := queryRow(ctx, db, next, map[string]any{"n": 41})
				if err != nil {
					return err
				}
				return r.Scan(&got)
			})
			if err != nil || got != 42 {
				t.Fatalf("@n + 1 with n = 41: %d, %v; want 42", got, err)
			}

			err = where.run(func(db *gorm.DB) error {
				r, err := queryRow(ctx, db, none, nil)
				if err != nil {
					return err
				}
				return r.Scan(&got)
			})
			if !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("no row: %v, want sql.ErrNoRows", err)
			}

			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = where.run(func(db *gorm.DB) error {
				r, err := queryRow(short, db, sleep, map[string]any{"seconds": 30})
				if err != nil {
					return err
				}
				var s string
				return r.Scan(&s)
			})
			if err == nil || time.Since(start) > 10*time.Second {
				t.Fatalf("pg_sleep(30) with 200 ms to run: %v after %s; want an error within seconds", err, time.Since(start))
			}

			got = 0
			r, err := queryRow(ctx, db, next, map[string]any{"n": 1})
			if err == nil {
				err = r.Scan(&got)
			}
			if err != nil || got != 2 {
				t.Fatalf("the pool's next statement: %d, %v; want 2", got, err)
			}
		})
	}
}
