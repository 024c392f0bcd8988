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
	// RetryAfter is when the retry can take the claim over: at once (1s)
	// after the lock was ended early, or what is left of the lock.
	RetryAfter time.Duration
	// Err is the cause, for the log.
	Err error
}

// Error says the outcome is unknown, with the cause.
func (e *OutcomeUnknownError) Error() string {
	return "payment outcome unknown: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// InProgressError: another request holds the key (or the external payment)
// right now. Retry after RetryAfter.
type InProgressError struct {
	// RetryAfter is how long to wait before the retry: what is left of the
	// claim's lock (at least a second), or a second when there is no lock
	// to measure (the same charge under another key).
	RetryAfter time.Duration
}

// Error says a request for the key is in progress.
func (e *InProgressError) Error() string { return "a request for this key is in progress" }
