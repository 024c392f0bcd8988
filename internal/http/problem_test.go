package http

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/example/payment-service/internal/app"
)

// Retry-After has whole seconds: a wait is rounded up, so a client never
// comes back before the lock it met has run out, and is at least 1.
func TestRetryAfterRoundsUpToWholeSeconds(t *testing.T) {
	t.Parallel()
	e := echo.New()
	handle := errorHandler(slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{
		{300 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1001 * time.Millisecond, "2"},
		{25*time.Second + time.Nanosecond, "26"},
	} {
		rec := httptest.NewRecorder()
		handle(&app.InProgressError{RetryAfter: tc.wait}, e.NewContext(httptest.NewRequest(http.MethodPost, "/payments", nil), rec))
		if got := rec.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("wait %s: Retry-After %q, want %q", tc.wait, got, tc.want)
		}
	}
}
