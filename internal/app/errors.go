package app

import (
	"errors"
	"time"
)

// Errors a use case returns. internal/http maps each to a problem type in
// one place.
var (
	// ErrKeyReused: the idempotency key was used before for another command.
	ErrKeyReused = errors.New("idempotency key reused for a different command")
	// ErrUnknownProvider: no adapter for the named payment provider.
	ErrUnknownProvider = errors.New("unknown payment provider")
	// ErrProviderUnavailable: the provider did not charge (it said so, or
	// the request never reached it); the key was released, so a retry with
	// the same key runs the command again.
	ErrProviderUnavailable = errors.New("payment provider unavailable")
)

// OutcomeUnknownError: the provider was called, and whether it charged is
// not known here (its answer was lost, or it answered and the answer could
// not be recorded). Nothing was deleted: the key stays claimed with its
// PENDING payment, and a retry with the same key and body, after
// RetryAfter, asks the provider again with the same provider idempotency
// key and records what it says. A retry with a new key or a new external
// payment is what must never happen.
type OutcomeUnknownError struct {
	RetryAfter time.Duration
	Err        error // the cause, for the log
}

func (e *OutcomeUnknownError) Error() string {
	return "payment outcome unknown: " + e.Err.Error()
}

func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// InProgressError: another request holds the key (or the external payment)
// right now. Retry after RetryAfter.
type InProgressError struct {
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string { return "a request for this key is in progress" }
