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
	// ErrNoTwoStepPayments: the provider takes no authorizations
	// (captureMethod manual).
	ErrNoTwoStepPayments = errors.New("the payment provider takes no two-step payments")
	// ErrAmountNotInMinorUnits: the provider counts in minor units
	// (ProviderAbilities.MinorUnits) and the amount has more fraction
	// digits than its currency (10.505 EUR, 500.5 JPY): refused before
	// anything is stored or sent, never rounded.
	ErrAmountNotInMinorUnits = errors.New("the amount cannot be written in its currency's minor units")
	// ErrProviderUnavailable: the provider did not act (it said so, or the
	// request never reached it); the key was released, so a retry with the
	// same key runs the command again.
	ErrProviderUnavailable = errors.New("payment provider unavailable")
)

// Errors the ports return, which the use cases act on.
var (
	// ErrLockLost: the token no longer owns the key: its lock ran out and
	// another attempt took the key over, or a provider's event completed it.
	ErrLockLost = errors.New("idempotency lock lost")
	// ErrClaimNeedsTransaction: phase 1's statement on its own found an
	// answer other than "claimed, with a reservation to call for", and
	// committed nothing.
	ErrClaimNeedsTransaction = errors.New("phase 1 needs a transaction")
	// ErrReserveContended: the rows that blocked a reservation kept
	// disappearing between the insert and the read. Retryable.
	ErrReserveContended = errors.New("reservation contended")
	// ErrStoreUnavailable wraps database errors that mean the database
	// cannot be reached. The service fails closed on them: 503, never a
	// charge without its record.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrDataRejected wraps database errors that reject the data itself: a
	// value out of range or of the wrong form (SQLSTATE class 22), a broken
	// constraint (class 23). Unlike every other failure, which is about the
	// system and may pass, the same data is rejected again however often it
	// is retried: the order consumer dead-letters one event on it instead
	// of stalling its partition.
	ErrDataRejected = errors.New("data rejected by the store")
)

// OutcomeUnknownError: the provider was called, and whether it acted is not
// known here (its answer was lost, or it answered and the answer could not
// be recorded). Nothing was deleted: the key stays claimed with its PENDING
// reservation, and a retry with the same key and body, after RetryAfter,
// asks the provider again with the same provider idempotency key and
// records what it says. A retry with a new key or a new external id is
// what must never happen.
type OutcomeUnknownError struct {
	// RetryAfter is when the retry can take the claim over: a second when
	// the lock was ended early, else what is left of the lock.
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

// InProgressError: another request holds the key (or the same external
// payment, or the order's live payment) right now. Retry after RetryAfter.
type InProgressError struct {
	// RetryAfter is how long to wait: a second while the attempt holding
	// the key may still answer, else what is left of its lock.
	RetryAfter time.Duration
}

// Error says a request for the key is in progress.
func (e *InProgressError) Error() string { return "a request for this key is in progress" }
