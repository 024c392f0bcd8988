package repository

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// The statement is rendered only for a line that is written: rendering
// costs a regexp pass per statement, which the hot path must not pay.
func TestSQLLoggerRendersOnlyWhatItLogs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		took       time.Duration
		err        error
		wantRender bool
		wantLine   string
	}{
		{"fast and fine", time.Millisecond, nil, false, ""},
		{"no rows is not a failure", time.Millisecond, gorm.ErrRecordNotFound, false, ""},
		{"slow", time.Second, nil, true, "SQL slow"},
		{"failed", time.Millisecond, errors.New("boom"), true, "SQL failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			l := sqlLogger{log: slog.New(slog.NewTextHandler(&out, nil)), slow: 500 * time.Millisecond}
			rendered := false
			l.Trace(context.Background(), time.Now().Add(-tc.took), func() (string, int64) {
				rendered = true
				return "SELECT 1", 1
			}, tc.err)
			if rendered != tc.wantRender || !strings.Contains(out.String(), tc.wantLine) || (tc.wantLine == "" && out.Len() > 0) {
				t.Fatalf("rendered = %v, log %q; want rendered = %v and %q", rendered, out.String(), tc.wantRender, tc.wantLine)
			}
		})
	}
}
