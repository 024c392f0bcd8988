package domain

import "errors"

// Domain errors. Adapters map them to their own vocabulary once: the HTTP
// layer to problem types, the repository from SQL states.
var (
	// ErrInvalid wraps every validation failure of a domain value.
	ErrInvalid = errors.New("invalid value")
	// ErrOrderNotFound: the payment names an order this service does not know.
	ErrOrderNotFound = errors.New("order not found")
	// ErrOrderMismatch: the order exists, but customer, amount or currency differ.
	ErrOrderMismatch = errors.New("payment does not match its order")
	// ErrPaymentNotFound: no payment with that id (for that client).
	ErrPaymentNotFound = errors.New("payment not found")
	// ErrCaptureMismatch: a capture in another currency than its payment's,
	// or above what it holds.
	ErrCaptureMismatch = errors.New("capture does not match its authorization")
)
