package repository

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/example/payment-service/internal/app"
)

// A server that dies in the middle of a statement (a crash, an immediate
// shutdown, a failover) leaves pgx reading a connection that ends without
// an answer: io.ErrUnexpectedEOF (or io.EOF), wrapped by the statement's
// context. That is the database being unreachable: 503 with Retry-After,
// never 500. The fault suite's seeded rounds met it (a PostgreSQL
// immediate shutdown during phase 1 of a charge answered 500).
func TestConnectionEndedMidStatementIsStoreUnavailable(t *testing.T) {
	t.Parallel()
	for _, cause := range []error{io.ErrUnexpectedEOF, io.EOF} {
		err := mapError(fmt.Errorf("claim key and reserve payment: %w", cause))
		if !errors.Is(err, app.ErrStoreUnavailable) {
			t.Errorf("%v: mapped to %v, want ErrStoreUnavailable", cause, err)
		}
	}
}
