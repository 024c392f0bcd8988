package app

import "errors"

// ErrDataRejected wraps database errors that reject the data itself: a
// value out of range or of the wrong form (SQLSTATE class 22), a broken
// constraint (class 23). Unlike ErrStoreUnavailable and every other
// failure, which are about the system (a network, a lock, a missing table)
// and may pass, the same data is rejected again however often it is
// retried. The order consumer uses the difference to dead-letter one event
// instead of stalling its partition behind it.
var ErrDataRejected = errors.New("data rejected by the store")
