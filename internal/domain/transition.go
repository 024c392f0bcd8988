package domain

import "fmt"

// TransitionKind is what a transition of an authorized payment does.
type TransitionKind string

const (
	// TransitionCapture takes the held money, all or part of it.
	TransitionCapture TransitionKind = "capture"
	// TransitionVoid releases the hold.
	TransitionVoid TransitionKind = "void"
)

// TransitionID identifies a payment_transition row.
type TransitionID int64

// MaxCaptureReferenceLength matches the column's CHECK.
const MaxCaptureReferenceLength = 128

// Transition is a capture or a void of an authorized payment: at most one
// of a payment's transitions is PENDING or SUCCEEDED, so a capture and a
// void, or two captures, never both win.
type Transition struct {
	// ID is the row's id; zero until it is stored.
	ID TransitionID
	// PaymentID is the authorized payment.
	PaymentID PaymentID
	// Kind is capture or void.
	Kind TransitionKind
	// Amount is what a capture takes, in the payment's currency; zero for
	// a void.
	Amount Money
	// Reference is the client's id of a capture at the provider; empty
	// for a void.
	Reference string
	// Status is PENDING until the provider decides: SUCCEEDED, DECLINED,
	// or FAILED (refused for good). A DECLINED or FAILED transition leaves
	// the payment AUTHORIZED.
	Status PaymentStatus
}

// NewCapture validates a capture of amount from an authorized payment:
// in its currency and no more than it holds. Whether the payment is still
// authorized, with no other transition, only the database can say, in the
// capture's claim.
func NewCapture(p Payment, amount Money, reference string) (Transition, error) {
	switch {
	case p.ID <= 0:
		return Transition{}, fmt.Errorf("%w: a capture needs a stored payment", ErrInvalid)
	case amount.Currency() != p.Charge.Amount.Currency():
		return Transition{}, fmt.Errorf("%w: currency must be the payment's, %s", ErrCaptureMismatch, p.Charge.Amount.Currency())
	case amount.Amount().GreaterThan(p.Charge.Amount.Amount()):
		return Transition{}, fmt.Errorf("%w: amount must not exceed the authorized %s", ErrCaptureMismatch, p.Charge.Amount.AmountString())
	case len(reference) == 0 || len(reference) > MaxCaptureReferenceLength:
		return Transition{}, fmt.Errorf("%w: externalCaptureId must be 1 to %d characters", ErrInvalid, MaxCaptureReferenceLength)
	}
	return Transition{PaymentID: p.ID, Kind: TransitionCapture, Amount: amount, Reference: reference, Status: PaymentPending}, nil
}

// NewVoid is the void of an authorized payment.
func NewVoid(p Payment) (Transition, error) {
	if p.ID <= 0 {
		return Transition{}, fmt.Errorf("%w: a void needs a stored payment", ErrInvalid)
	}
	return Transition{PaymentID: p.ID, Kind: TransitionVoid, Status: PaymentPending}, nil
}

// ProviderIdempotencyKey is the key this service sends the provider for
// the transition of payment p: derived from the payment and, for a
// capture, its reference, so every attempt at one capture (or at the
// payment's void), whatever client key it came with, is one operation to
// the provider.
func (t Transition) ProviderIdempotencyKey(p Payment) string {
	key := p.Charge.ProviderIdempotencyKey() + ":" + string(t.Kind)
	if t.Kind == TransitionCapture {
		key += ":" + t.Reference
	}
	return key
}
