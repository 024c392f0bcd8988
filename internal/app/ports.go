package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// Transactor runs fn in one database transaction: it commits when fn
// returns nil and rolls back otherwise. The repositories handed to fn work
// inside that transaction only.
type Transactor interface {
	// Transact runs fn in a new transaction and returns fn's error, or the
	// database's (app.ErrStoreUnavailable when it cannot be reached).
	Transact(ctx context.Context, fn func(ctx context.Context, r Repos) error) error
}

// Repos are the repositories bound to one transaction.
type Repos struct {
	// Charges is phase 1 of a charge (claim and reserve) as one statement.
	Charges Charges
	// Idempotency is the idempotency_record table: the first layer.
	Idempotency IdempotencyRecords
	// Payments is the payment table: the second and third layers.
	Payments Payments
	// Orders reads the order projection a charge is checked against.
	Orders Orders
	// Refunds is the refund table: phase 1 of a refund inside the
	// transaction, its rare answers, and its GiveBack.
	Refunds Refunds
	// Outbox appends events that the relay publishes after the commit. No
	// use case calls it since phase 3 became one statement, which writes
	// its outbox row itself (ChargeStore.RecordOutcome); the outbox relay's
	// tests write their rows through it.
	Outbox Outbox

	// ChargeStatements and RefundStatements are the commands' statements
	// that are atomic on their own, run inside this transaction: a
	// provider's event records phase 3 with its processed_event row
	// (apply_provider_event.go).
	ChargeStatements ChargeStore
	// RefundStatements: see ChargeStatements.
	RefundStatements RefundStore
	// ProviderReports reads what a provider's event is about and keeps
	// the events that contradict the record.
	ProviderReports ProviderReports

	// The order-projection consumer's ports (apply_order_events.go).
	// ProcessedEvents is processed_event (R-DIST-IDEM-2).
	ProcessedEvents ProcessedEvents
	// OrderProjections writes and reads order_projection.
	OrderProjections OrderProjections
}

// IdempotencyScope names one idempotency record: keys are per client.
type IdempotencyScope struct {
	// ClientID is the authenticated API client that sent the key.
	ClientID domain.ClientID
	// Key is the client's Idempotency-Key header.
	Key string
}

// StoredResponse is the reply kept for a key (R-DIST-IDEM-3): the HTTP
// status and the exact body bytes, replayed as they are.
type StoredResponse struct {
	// StatusCode is the HTTP status the first answer had.
	StatusCode int
	// Body is the first answer's body, byte for byte.
	Body []byte
}

// RecordStatus is where an idempotency record stands.
type RecordStatus string

const (
	// RecordInProgress: the key is claimed and its command has not ended;
	// the record carries a lock token and a lock expiry.
	RecordInProgress RecordStatus = "IN_PROGRESS"
	// RecordCompleted: the command's answer is stored and is replayed to
	// every request with the same key and command.
	RecordCompleted RecordStatus = "COMPLETED"
)

// IdempotencyRecord is a key's stored state.
type IdempotencyRecord struct {
	// Scope is the client and key the record belongs to.
	Scope IdempotencyScope
	// CommandHash is the hash of the command that claimed the key
	// (ChargeCommand.Hash for a charge).
	CommandHash string
	// Command names the command the record belongs to (migration 00013).
	// Read where the jobs need it (the completer's list, the records read
	// through GORM); the hot path's lock-free read leaves it empty, since
	// the command hash already tells one command from another.
	Command CommandName
	// Status is IN_PROGRESS or COMPLETED.
	Status RecordStatus
	// Response is the stored answer; set when Completed.
	Response StoredResponse
	// PaymentID is the recovery point: the payment reserved for the
	// command, which a takeover resumes. Nil if none was reserved.
	PaymentID *domain.PaymentID
	// RefundID is a refund's recovery point (migration 00016): the refund
	// reserved for the command. Nil for other commands, and read where the
	// jobs need it (the completer's list), not on the hot path.
	RefundID *domain.RefundID
	// LockToken is the current owner's token while IN_PROGRESS; every
	// write after the claim is fenced by it.
	LockToken uuid.UUID
	// LockedUntil is when the claim's lock runs out (database clock);
	// after it a retry may take the claim over.
	LockedUntil time.Time
	// CreatedAt starts the record's retention (R-DIST-IDEM-5).
	CreatedAt time.Time
}

// Charges is phase 1 of a charge as one statement, inside the caller's
// transaction.
type Charges interface {
	// ClaimAndReserve reserves a PENDING payment for the charge (unless a
	// unique index says no, or the order does not match) and claims the
	// key, linked to that payment: insert-if-absent, or the takeover of an
	// IN_PROGRESS record of the same command whose lock has expired, which
	// keeps the record's own payment. When the key is not claimed, whatever
	// the statement reserved must be rolled back with the transaction.
	ClaimAndReserve(ctx context.Context, c ChargeClaim) (ClaimAndReserveResult, error)
}

// ChargeClaim is what ClaimAndReserve needs.
type ChargeClaim struct {
	// Scope is the key to claim.
	Scope IdempotencyScope
	// CommandHash is the command's hash: a takeover requires the same one.
	CommandHash string
	// Token proves ownership when completing or releasing.
	Token uuid.UUID
	// LockFor is how long the claim blocks duplicates.
	LockFor time.Duration
	// Charge is what to reserve a PENDING payment for.
	Charge domain.Charge
}

// ClaimAndReserveResult is what the statement did.
type ClaimAndReserveResult struct {
	// Claimed: the key is this request's now (new, or taken over).
	Claimed bool
	// Reserved: a new PENDING payment was inserted for the charge; it is
	// the claim's recovery point.
	Reserved bool
	// OrderMatches: the order projection holds the order, with the
	// charge's customer, amount and currency.
	OrderMatches bool
	// SagaID is the order's saga, for the payment event.
	SagaID uuid.NullUUID
	// Payment is the reserved payment or, after a takeover, the recovery
	// point's payment; nil when neither.
	Payment *domain.Payment
}

// ChargeStore holds the statements of the charge that are atomic on their
// own: each is one SQL statement, so it runs without a transaction around
// it, in one round trip.
type ChargeStore interface {
	// ClaimAndReserve is phase 1 on its own, Charges.ClaimAndReserve's
	// statement committed by itself. It commits only the usual answer: the
	// key claimed, with a PENDING payment to charge that is its recovery
	// point (Reserved, or a takeover's). For any other answer it commits
	// nothing and returns ErrClaimNeedsTransaction: run
	// Charges.ClaimAndReserve in a transaction instead.
	ClaimAndReserve(ctx context.Context, c ChargeClaim) (ClaimAndReserveResult, error)
	// RecordOutcome is phase 3: it completes the key with the response,
	// fenced by the lock token; sets the payment's final status (the
	// event's payment's status); and appends the event to the outbox: all
	// or nothing. ErrLockLost if token no longer owns the key.
	RecordOutcome(ctx context.Context, o OutcomeRecord) error
}

// OutcomeRecord is what phase 3 writes.
type OutcomeRecord struct {
	// Scope is the key to complete.
	Scope IdempotencyScope
	// Token is the claim's lock token; the write happens only while it
	// still owns the key.
	Token uuid.UUID
	// Response is the answer stored for the key.
	Response StoredResponse
	// Event carries the payment with its final status.
	Event PaymentEvent
}

// IdempotencyRecords is the first layer of R-DIST-IDEM-4.
type IdempotencyRecords interface {
	// Get reads the key's record as it stands (found is false if there is
	// none).
	Get(ctx context.Context, scope IdempotencyScope) (rec IdempotencyRecord, found bool, err error)
	// SetRecoveryPoint links the claimed record to its reserved payment.
	SetRecoveryPoint(ctx context.Context, scope IdempotencyScope, token uuid.UUID, payment domain.PaymentID) error
	// SetRefundRecoveryPoint links the claimed record to its reserved
	// refund (a refund's claim whose reservation came in a second statement).
	SetRefundRecoveryPoint(ctx context.Context, scope IdempotencyScope, token uuid.UUID, refund domain.RefundID) error
	// Complete stores the outcome and ends the claim. It returns
	// ErrLockLost if token no longer owns the record.
	Complete(ctx context.Context, scope IdempotencyScope, token uuid.UUID, resp StoredResponse) error
	// Release deletes the claim so the key can be used again; ErrLockLost
	// if token no longer owns it.
	Release(ctx context.Context, scope IdempotencyScope, token uuid.UUID) error
	// ExpireLock ends token's lock now but keeps the claim IN_PROGRESS with
	// its recovery point, so the next retry with the key takes it over at
	// once instead of waiting for the lock to run out. ErrLockLost if token
	// no longer owns the record.
	ExpireLock(ctx context.Context, scope IdempotencyScope, token uuid.UUID) error
}

// Payments is the payment table: the second layer of R-DIST-IDEM-4
// (one row per provider and external payment) and the third layer (at most
// one PENDING or SUCCEEDED payment per order).
type Payments interface {
	// Reserve inserts a PENDING payment for c unless that would make a
	// second row for its external payment or a second live payment for its
	// order; it then returns the row that stands in the way. It never
	// creates a second row. ErrReserveContended if the rows in the way kept
	// vanishing (released or declined) while it looked.
	Reserve(ctx context.Context, client domain.ClientID, c domain.Charge) (Reservation, error)
	// Get returns the payment; domain.ErrPaymentNotFound if none.
	Get(ctx context.Context, id domain.PaymentID) (domain.Payment, error)
	// DeletePending removes a PENDING payment whose charge did not happen.
	DeletePending(ctx context.Context, id domain.PaymentID) error
}

// ReservationKind says what Reserve did.
type ReservationKind int

const (
	// Reserved: a new PENDING payment was inserted; it is this request's.
	Reserved ReservationKind = iota + 1
	// ExternalPaymentExists: a payment with the same provider and external
	// payment id exists (the second layer, R-DIST-IDEM-4).
	ExternalPaymentExists
	// OrderHasLivePayment: the order already has a PENDING or SUCCEEDED
	// payment under another external payment (the third layer).
	OrderHasLivePayment
)

// Reservation is Reserve's answer: the new payment, or the one in the way.
type Reservation struct {
	// Kind says whether Payment is new or the row in the way.
	Kind ReservationKind
	// Payment is the reserved payment, or the one that stood in the way.
	Payment domain.Payment
}

// ErrReserveContended: the rows that blocked a reservation disappeared
// again and again between the insert and the read. Retryable.
var ErrReserveContended = errors.New("payment reservation contended")

// Orders reads the order projection.
type Orders interface {
	// Get returns domain.ErrOrderNotFound if the order is unknown.
	Get(ctx context.Context, id domain.OrderID) (domain.Order, error)
}

// ProviderCharge is one charge request to a payment provider.
type ProviderCharge struct {
	// IdempotencyKey is derived from the business operation, so the
	// provider charges a payment once however often it is asked.
	IdempotencyKey string
	// Charge is what to charge: amount, currency, and the external
	// payment as the provider's reference.
	Charge domain.Charge
}

// ProviderDecision is the provider's answer.
type ProviderDecision string

const (
	// ProviderApproved: the provider charged.
	ProviderApproved ProviderDecision = "APPROVED"
	// ProviderDeclined: the provider refused the charge (a final answer,
	// recorded like an approval).
	ProviderDeclined ProviderDecision = "DECLINED"
)

// PaymentProvider charges money on the other side of a network.
//
// The answer to Charge is one of four cases, and the use case acts on each:
//
//   - a decision (nil error): ProviderApproved or ProviderDeclined;
//   - refused for good: an error wrapping ErrProviderRefused (which wraps
//     ErrProviderNotCharged). The provider refused this request before
//     charging, for a reason that asking again does not change (the
//     request is invalid to it: a 400 or 422);
//   - not charged for now: an error wrapping ErrProviderNotCharged alone.
//     The provider said so before charging, for a reason that may pass (a
//     5xx or 429 saying "not charged", our credentials refused), or the
//     request never left this process (connection refused, a rejection that
//     proves it was not processed). Nothing happened at the provider for
//     this request;
//   - unknown: any other error. Timeouts, resets after the request was
//     sent, 5xx, "in progress" refusals, answers that cannot be read: the
//     charge may have been made. Adapters should wrap
//     ErrProviderOutcomeUnknown, but an error that wraps neither is unknown
//     too, so an adapter that fails to classify an error errs on the safe
//     side.
//
// Both refusals speak for the request that got them only. A provider looks
// at a request before its idempotency key (validation, rate limits, rules
// that change), so a retry can be refused although an earlier request
// under the same key charged: LookupCharge, not the refusal, says what the
// key holds.
//
// Asking again with the same IdempotencyKey is always safe: the provider
// returns its first answer and charges nothing new. Adapters never retry on
// their own; the use case owns retries.
type PaymentProvider interface {
	// Charge asks the provider to charge req under req.IdempotencyKey and
	// returns its decision, or an error in one of the cases above.
	Charge(ctx context.Context, req ProviderCharge) (ProviderDecision, error)
	// LookupCharge asks the provider, without charging, what it holds under
	// an idempotency key: the decision of the charge made under it, or an
	// error wrapping ErrNoProviderCharge when the provider states that no
	// charge was made under it and none is being made. Any other error
	// means it cannot be known now.
	LookupCharge(ctx context.Context, idempotencyKey string) (ProviderDecision, error)
}

// Errors a PaymentProvider wraps (see PaymentProvider for their meaning).
var (
	// ErrProviderNotCharged: the provider certainly did not charge for
	// this request.
	ErrProviderNotCharged = errors.New("payment provider did not charge")
	// ErrProviderRefused: the provider refused this request for good,
	// before charging; it wraps ErrProviderNotCharged.
	ErrProviderRefused = fmt.Errorf("%w: refused for good", ErrProviderNotCharged)
	// ErrProviderOutcomeUnknown: the provider may or may not have charged.
	ErrProviderOutcomeUnknown = errors.New("payment provider outcome unknown")
	// ErrNoProviderCharge: LookupCharge found no charge under the key.
	ErrNoProviderCharge = errors.New("payment provider holds no charge for the key")
)

// OutcomeKind says what a charge command ended in.
type OutcomeKind int

const (
	// OutcomeCharged: a new payment, approved by the provider.
	OutcomeCharged OutcomeKind = iota + 1
	// OutcomeDeclined: a new payment, refused by the provider.
	OutcomeDeclined
	// OutcomeAlreadyRecorded: a new key for an external payment that is
	// already recorded as the same charge; the existing payment is returned.
	OutcomeAlreadyRecorded
	// OutcomeExternalPaymentConflict: the external payment is recorded as a
	// different charge (or for another client).
	OutcomeExternalPaymentConflict
	// OutcomeOrderAlreadyPaid: the order is already paid under another
	// external payment (the third layer); nothing was sent to the provider.
	OutcomeOrderAlreadyPaid
	// OutcomeFailed: a new payment that the provider refused for good,
	// with no charge under its key; it is recorded as FAILED.
	OutcomeFailed
)

// ChargeOutcome is the result of a charge command before it is rendered.
type ChargeOutcome struct {
	// Kind is what the command ended in.
	Kind OutcomeKind
	// Payment is the payment the answer shows; empty for the conflicts,
	// which reveal no payment.
	Payment domain.Payment
}

// ResponseEncoder renders an outcome into the response stored for the key
// and sent to the client. The HTTP adapter implements it, so the use case
// can store the exact reply in the same transaction as the payment without
// knowing HTTP.
type ResponseEncoder interface {
	// EncodeChargeOutcome returns the status and body bytes that answer
	// the outcome, now and on every replay.
	EncodeChargeOutcome(ChargeOutcome) (StoredResponse, error)
}

// ErrClaimNeedsTransaction: phase 1's statement on its own found an answer
// other than "claimed, with a payment to charge", and rolled back.
var ErrClaimNeedsTransaction = errors.New("phase 1 needs a transaction")

// ErrLockLost: the claim was taken over by another request after it expired.
var ErrLockLost = errors.New("idempotency lock lost")

// ErrStoreUnavailable wraps database errors that mean the database cannot be
// reached. The service fails closed on them: 503, never a charge without
// its record.
var ErrStoreUnavailable = errors.New("store unavailable")

// ProviderRefund is one refund request to a payment provider.
type ProviderRefund struct {
	// IdempotencyKey is the refund's own provider key
	// (domain.Refund.ProviderIdempotencyKey): derived from the business
	// operation, so the provider refunds once however often it is asked.
	IdempotencyKey string
	// ChargeKey is the provider key the refunded payment was charged under
	// (domain.Charge.ProviderIdempotencyKey): how the provider knows the
	// charge, since this service keeps no provider charge id.
	ChargeKey string
	// Refund is what to refund: amount, currency, and the external refund
	// id as the provider's reference.
	Refund domain.Refund
}

// RefundProvider gives money back on the other side of a network. It is
// a port of its own, beside PaymentProvider: each command asks for the
// port it needs.
//
// Its answers fall in PaymentProvider's four cases, with the same errors,
// read for a refund: a decision (ProviderApproved: refunded;
// ProviderDeclined); refused for good (ErrProviderRefused: among others a
// refund beyond what the charge has left); not refunded for now
// (ErrProviderNotCharged alone); unknown (anything else). LookupRefund
// answers as LookupCharge does, ErrNoProviderCharge meaning that no refund
// was made under the key and none is being made. Asking again with the
// same IdempotencyKey is always safe; adapters never retry on their own.
type RefundProvider interface {
	// Refund asks the provider to refund req under req.IdempotencyKey.
	Refund(ctx context.Context, req ProviderRefund) (ProviderDecision, error)
	// LookupRefund asks the provider, without refunding, what it holds
	// under an idempotency key.
	LookupRefund(ctx context.Context, idempotencyKey string) (ProviderDecision, error)
}

// RefundReservationKind says what a reservation did.
type RefundReservationKind int

const (
	// RefundReserved: a new PENDING refund was inserted and its amount
	// added to the payment's refund total.
	RefundReserved RefundReservationKind = iota + 1
	// RefundPaymentNotFound: no payment with the id belongs to the client.
	RefundPaymentNotFound
	// RefundPaymentNotRefundable: the client's payment is not SUCCEEDED, or
	// is in another currency or at another provider than the refund.
	RefundPaymentNotRefundable
	// RefundExternalRefundExists: a refund with the same provider and
	// external refund id is recorded (Refund is that one, whoever's it is).
	RefundExternalRefundExists
	// RefundOverTheAmount: the refund would take the payment's refund total
	// beyond the amount charged.
	RefundOverTheAmount
)

// String names the kind, for messages and test failures.
func (k RefundReservationKind) String() string {
	switch k {
	case RefundReserved:
		return "reserved"
	case RefundPaymentNotFound:
		return "payment not found"
	case RefundPaymentNotRefundable:
		return "payment not refundable"
	case RefundExternalRefundExists:
		return "external refund exists"
	case RefundOverTheAmount:
		return "over the amount"
	default:
		return fmt.Sprintf("RefundReservationKind(%d)", int(k))
	}
}

// RefundReservation is ReserveRefund's answer.
type RefundReservation struct {
	// Kind is what happened.
	Kind RefundReservationKind
	// Refund is the new refund (RefundReserved) or the existing one
	// (RefundExternalRefundExists); zero otherwise.
	Refund domain.Refund
	// ClientID is Refund's client.
	ClientID domain.ClientID
	// RefundReserved is the payment's refund total after the statement,
	// when the client's payment was found.
	RefundReserved decimal.Decimal
}

// Refunds is a refund's statements inside the caller's transaction.
type Refunds interface {
	// ClaimAndReserveRefund is RefundStore.ClaimAndReserveRefund's statement
	// in the transaction, returning every answer.
	ClaimAndReserveRefund(ctx context.Context, c RefundClaim) (RefundClaimResult, error)
	// ReserveRefund reserves the refund for client's payment, or says what
	// stands in the way (the claim's rare answers).
	ReserveRefund(ctx context.Context, client domain.ClientID, r domain.Refund) (RefundReservation, error)
	// LockRefundPayment locks refund id's payment, as a refund's claim
	// does before it claims the key; an error if there is no such refund.
	LockRefundPayment(ctx context.Context, id domain.RefundID) error
	// ReleaseRefund deletes a PENDING refund and gives its amount back.
	ReleaseRefund(ctx context.Context, id domain.RefundID) error
	// GetRefund reads a refund; an error if there is none.
	GetRefund(ctx context.Context, id domain.RefundID) (domain.Refund, error)
	// ListRefunds lists a payment's refunds, oldest first.
	ListRefunds(ctx context.Context, payment domain.PaymentID) ([]domain.Refund, error)
}

// RefundClaim is what a refund's phase 1 needs: the key's claim, and the
// PENDING refund to reserve with it.
type RefundClaim struct {
	KeyClaim
	// Refund is the PENDING refund to reserve.
	Refund domain.Refund
}

// RefundClaimResult is what a refund's phase 1 statement did.
type RefundClaimResult struct {
	// Claimed: the key is this request's now (new, or taken over).
	Claimed bool
	// Reserved: a new PENDING refund was inserted; it is the recovery point.
	Reserved bool
	// SagaID is the payment's order's saga, for the refund's event.
	SagaID uuid.NullUUID
	// Refund is the reserved refund or, after a takeover, the recovery
	// point's; nil when neither.
	Refund *domain.Refund
}

// RefundStore holds a refund's statements that are atomic on their own.
type RefundStore interface {
	// ClientPayment reads payment id, on its own (no transaction), if it
	// is client's; domain.ErrPaymentNotFound otherwise, another client's
	// payment included.
	ClientPayment(ctx context.Context, client domain.ClientID, id domain.PaymentID) (domain.Payment, error)
	// ClaimAndReserveRefund is phase 1 on its own. It commits only a claimed
	// key with a PENDING refund that is its recovery point, and returns
	// ErrClaimNeedsTransaction, with nothing committed, for any other answer.
	ClaimAndReserveRefund(ctx context.Context, c RefundClaim) (RefundClaimResult, error)
	// RecordRefundOutcome is phase 3: it completes the key fenced by the
	// token, sets the refund's final status (the event's refund's; DECLINED
	// and FAILED give the amount back) and appends the event: all or
	// nothing. ErrLockLost if token no longer owns the key.
	RecordRefundOutcome(ctx context.Context, o RefundOutcomeRecord) error
}

// RefundOutcomeRecord is what a refund's phase 3 writes.
type RefundOutcomeRecord struct {
	// Scope is the key to complete.
	Scope IdempotencyScope
	// Token is the claim's lock token.
	Token uuid.UUID
	// Response is the answer stored for the key.
	Response StoredResponse
	// Event carries the refund with its final status.
	Event RefundEvent
}

// RefundOutcomeKind says what a refund command ended in.
type RefundOutcomeKind int

const (
	// RefundOutcomeRefunded: a new refund, made by the provider.
	RefundOutcomeRefunded RefundOutcomeKind = iota + 1
	// RefundOutcomeDeclined: a new refund, declined by the provider; its
	// amount was given back.
	RefundOutcomeDeclined
	// RefundOutcomeFailed: a new refund the provider refused for good; its
	// amount was given back.
	RefundOutcomeFailed
	// RefundOutcomeAlreadyRecorded: a new key for an external refund that
	// is recorded as the same refund; the existing refund is returned.
	RefundOutcomeAlreadyRecorded
	// RefundOutcomeExternalRefundConflict: the external refund is recorded
	// as another refund (or another client's).
	RefundOutcomeExternalRefundConflict
)

// RefundOutcome is the result of a refund command before it is rendered.
type RefundOutcome struct {
	// Kind is what the command ended in.
	Kind RefundOutcomeKind
	// Refund is the refund the answer shows; empty for the conflict.
	Refund domain.Refund
}

// RefundResponseEncoder renders a refund outcome into the response stored
// for the key (the HTTP adapter implements it).
type RefundResponseEncoder interface {
	// EncodeRefundOutcome returns the status and body bytes that answer the
	// outcome, now and on every replay.
	EncodeRefundOutcome(RefundOutcome) (StoredResponse, error)
}
