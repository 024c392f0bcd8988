package repository

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/example/payment-service/internal/app"
)

// claim_needs_transaction's error (SQLSTATE PC001), wrapped as the claim
// statement wraps it, is ErrClaimNeedsTransaction, and only that code is.
func TestClaimNeedsTransactionIsErrClaimNeedsTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code string
		want bool
	}{{claimNeedsTransactionCode, true}, {"P0001", false}, {"23505", false}} {
		err := mapError(fmt.Errorf("claim key and reserve payment: %w", &pgconn.PgError{Code: tc.code}))
		if got := errors.Is(err, app.ErrClaimNeedsTransaction); got != tc.want {
			t.Errorf("SQLSTATE %s: ErrClaimNeedsTransaction %v, want %v (%v)", tc.code, got, tc.want, err)
		}
	}
}

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
