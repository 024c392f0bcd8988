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
	// ErrProviderUnavailable: the provider failed transiently; the key was
	// released, so a retry with the same key runs the command again.
	ErrProviderUnavailable = errors.New("payment provider unavailable")
)

// InProgressError: another request holds the key (or the external payment)
// right now. Retry after RetryAfter.
type InProgressError struct {
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string { return "a request for this key is in progress" }
