package repository

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// sqlLogger is GORM's logger for this service: a failed statement is
// logged at error, a slow one at warn, and nothing else is done. GORM runs
// no statement of the repository's (db.go): what it still sees is its own
// work, such as a transaction's.
//
// GORM's own slog logger renders every statement with its parameters (a
// regexp pass over the SQL) before it decides whether to log at all; the
// profile of a charge put that at about 7% of the service's CPU. This one
// renders the statement only for the lines it writes.
type sqlLogger struct {
	log  *slog.Logger
	slow time.Duration
}

func (l sqlLogger) LogMode(logger.LogLevel) logger.Interface { return l }

func (l sqlLogger) Info(ctx context.Context, msg string, args ...any) {
	l.log.InfoContext(ctx, fmt.Sprintf(msg, args...))
}

func (l sqlLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(msg, args...))
}

func (l sqlLogger) Error(ctx context.Context, msg string, args ...any) {
	l.log.ErrorContext(ctx, fmt.Sprintf(msg, args...))
}

func (l sqlLogger) Trace(ctx context.Context, begin time.Time, fc func() (sql string, rowsAffected int64), err error) {
	elapsed := time.Since(begin)
	switch {
	case err != nil && !errors.Is(err, gorm.ErrRecordNotFound):
		sql, rows := fc()
		l.log.ErrorContext(ctx, "SQL failed", "err", err, "duration", elapsed, "rows", rows, "sql", sql)
	case l.slow > 0 && elapsed > l.slow:
		sql, rows := fc()
		l.log.WarnContext(ctx, "SQL slow", "duration", elapsed, "rows", rows, "sql", sql)
	}
}
