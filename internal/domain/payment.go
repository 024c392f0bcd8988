package domain

import (
	"fmt"
	"strings"
	"time"
)

// ProviderName names a payment provider adapter, such as "sandbox".
type ProviderName string

// ExternalPaymentID is the provider-side id of a payment, chosen by the
// client; with the provider name it identifies one real payment.
type ExternalPaymentID string

// MaxExternalPaymentIDLength matches the column's CHECK.
const MaxExternalPaymentIDLength = 128

// Charge is the business content of a charge command: which order, who
// pays, how much, and through which provider payment.
type Charge struct {
	OrderID           OrderID
	CustomerID        CustomerID
	Amount            Money
	Provider          ProviderName
	ExternalPaymentID ExternalPaymentID
	// CaptureMethod is CaptureManual for an authorization, which holds the
	// amount for a later capture or void; anything else is a charge.
	CaptureMethod CaptureMethod
	// PaymentMethod, when set, is the provider's id of what the customer
	// pays with (Stripe's pm_...), sent with the charge. It is part of the
	// command (its hash) but not stored with the payment: a charge rebuilt
	// from its row has none (decision 0035).
	PaymentMethod string
}

// MaxPaymentMethodLength bounds a payment method's id.
const MaxPaymentMethodLength = 255

// CaptureMethod says whether a payment takes its money at once or in two
// steps.
type CaptureMethod string

const (
	// CaptureAutomatic: the charge takes the money at once.
	CaptureAutomatic CaptureMethod = "automatic"
	// CaptureManual: the provider holds the money, and a capture takes it
	// or a void releases it.
	CaptureManual CaptureMethod = "manual"
)

// Manual reports whether the charge is an authorization.
func (c Charge) Manual() bool { return c.CaptureMethod == CaptureManual }

// NewCharge validates the parts that Money does not.
func NewCharge(order OrderID, customer CustomerID, amount Money, provider ProviderName, external ExternalPaymentID) (Charge, error) {
	switch {
	case order <= 0:
		return Charge{}, fmt.Errorf("%w: orderId must be positive", ErrInvalid)
	case customer <= 0:
		return Charge{}, fmt.Errorf("%w: customerId must be positive", ErrInvalid)
	case provider == "":
		return Charge{}, fmt.Errorf("%w: paymentProvider is empty", ErrInvalid)
	case len(external) == 0 || len(external) > MaxExternalPaymentIDLength:
		return Charge{}, fmt.Errorf("%w: externalPaymentId must be 1 to %d characters", ErrInvalid, MaxExternalPaymentIDLength)
	}
	return Charge{OrderID: order, CustomerID: customer, Amount: amount, Provider: provider, ExternalPaymentID: external}, nil
}

// PaymentStatus is where a payment stands.
type PaymentStatus string

const (
	// PaymentPending: the row is reserved and the provider is being called.
	PaymentPending PaymentStatus = "PENDING"
	// PaymentSucceeded: the provider charged the payment.
	PaymentSucceeded PaymentStatus = "SUCCEEDED"
	// PaymentDeclined: the provider decided the charge, and declined it.
	PaymentDeclined PaymentStatus = "DECLINED"
	// PaymentFailed: the provider refused the charge request for good
	// before deciding it, and holds no charge under its key: nothing was
	// charged, and asking again would not change that.
	PaymentFailed PaymentStatus = "FAILED"
	// PaymentAuthorized: the provider holds the amount (a two-step
	// payment); a capture takes it (SUCCEEDED) or a void releases it.
	PaymentAuthorized PaymentStatus = "AUTHORIZED"
	// PaymentVoided: the hold was released by a void; nothing was taken.
	PaymentVoided PaymentStatus = "VOIDED"
	// PaymentExpired: the hold lapsed at the provider, as the provider
	// says; nothing was taken.
	PaymentExpired PaymentStatus = "EXPIRED"
)

// Final reports whether the payment's outcome is settled: the provider has
// decided it, or refused it for good.
//
// An authorization is decided too: what follows it is a command of its
// own (a capture or a void).
func (s PaymentStatus) Final() bool {
	switch s {
	case PaymentSucceeded, PaymentDeclined, PaymentFailed, PaymentAuthorized, PaymentVoided, PaymentExpired:
		return true
	}
	return false
}

// PaymentID identifies a payment row.
type PaymentID int64

// ClientID identifies the API client that owns a payment and its keys.
type ClientID string

// Payment is one charge of one order through one provider payment.
type Payment struct {
	ID        PaymentID
	ClientID  ClientID
	Charge    Charge
	Status    PaymentStatus
	CreatedAt time.Time
	// Captured is what a two-step payment's capture took; nil until it is
	// captured, and for a one-step charge, which took its whole amount.
	Captured *Money
	// CaptureKey is the provider key of a captured two-step payment's
	// capture, where it was read; how the provider knows the money taken.
	CaptureKey string
}

// CapturedAmount is the money the payment took: what a capture took, the
// whole amount of a one-step charge.
func (p Payment) CapturedAmount() Money {
	if p.Captured != nil {
		return *p.Captured
	}
	return p.Charge.Amount
}

// IsSameCharge reports whether a request by client for charge describes
// this very payment. R-DIST-IDEM-4: a new idempotency key for a known
// external payment gets the existing payment only when it is the same
// charge; anything else is a conflict, never a second row.
func (p Payment) IsSameCharge(client ClientID, c Charge) bool {
	return p.ClientID == client &&
		p.Charge.OrderID == c.OrderID &&
		p.Charge.CustomerID == c.CustomerID &&
		p.Charge.Amount.Equal(c.Amount) &&
		p.Charge.Provider == c.Provider &&
		p.Charge.ExternalPaymentID == c.ExternalPaymentID &&
		p.Charge.Manual() == c.Manual()
}

// ProviderIdempotencyKey is the key this service sends to the provider. It
// is derived from the business operation (provider + external payment id),
// not from the client's key, so every attempt at this payment, whatever key
// it came with, is the same operation to the provider and is charged once.
func (c Charge) ProviderIdempotencyKey() string {
	return string(c.Provider) + ":" + string(c.ExternalPaymentID)
}

// ExternalPaymentOfProviderKey is the external payment whose charge at
// provider has the provider key key (ProviderIdempotencyKey's inverse),
// for a report the provider sends on its own (a webhook), which names the
// charge by the key the service sent. ok is false for a key that is not a
// charge's at provider.
func ExternalPaymentOfProviderKey(provider ProviderName, key string) (external ExternalPaymentID, ok bool) {
	rest, ok := strings.CutPrefix(key, string(provider)+":")
	if !ok || rest == "" {
		return "", false
	}
	return ExternalPaymentID(rest), true
}

// RefundID identifies a refund row.
type RefundID int64

// ExternalRefundID is the client's id for one refund at the provider; with
// the provider name it identifies one real refund, as ExternalPaymentID
// does a payment (the refund's second layer).
type ExternalRefundID string

// MaxExternalRefundIDLength matches the refund table's CHECK.
const MaxExternalRefundIDLength = 128

// RefundStatus is where a refund stands: the payment's statuses, with the
// same meanings for the provider's refund as for its charge.
//
//   - PENDING: reserved against its payment, the provider is being called
//     or its answer is unknown; its amount counts against what may still
//     be refunded;
//   - SUCCEEDED: the provider refunded the amount;
//   - DECLINED: the provider decided the refund, and declined it;
//   - FAILED: the provider refused the request for good before deciding it
//     and holds no refund under its key.
//
// A DECLINED or FAILED refund's amount is free to be refunded again.
type RefundStatus = PaymentStatus

// The refund's statuses, by their refund names.
const (
	RefundPending   = PaymentPending
	RefundSucceeded = PaymentSucceeded
	RefundDeclined  = PaymentDeclined
	RefundFailed    = PaymentFailed
)

// Refund is one refund of part or all of a payment, through the provider
// that charged it.
type Refund struct {
	// ID is the refund row's id; zero until it is stored.
	ID RefundID
	// PaymentID is the payment refunded.
	PaymentID PaymentID
	// Amount is how much to give back, in the payment's currency.
	Amount Money
	// Provider is the payment's provider: a refund goes where the money
	// was taken.
	Provider ProviderName
	// ExternalRefundID is the client's id for this refund.
	ExternalRefundID ExternalRefundID
	// Status is PENDING until the provider decides.
	Status RefundStatus
	// CreatedAt is when the refund was reserved: no request for it left
	// before. Zero until it is stored.
	CreatedAt time.Time
}

// NewRefund validates a PENDING refund of amount from payment. The amount
// must be in the payment's currency and no more than the payment took (a
// two-step payment's capture, a charge's whole amount);
// whether it fits beside the payment's other refunds only the database can
// say, atomically (the payment's refund total).
func NewRefund(payment Payment, amount Money, external ExternalRefundID) (Refund, error) {
	switch {
	case payment.ID <= 0:
		return Refund{}, fmt.Errorf("%w: a refund needs a stored payment", ErrInvalid)
	case payment.Charge.Provider == "":
		return Refund{}, fmt.Errorf("%w: the payment has no provider", ErrInvalid)
	case amount.Currency() != payment.Charge.Amount.Currency():
		return Refund{}, fmt.Errorf("%w: currency must be the payment's, %s", ErrInvalid, payment.Charge.Amount.Currency())
	case amount.Amount().GreaterThan(payment.CapturedAmount().Amount()):
		return Refund{}, fmt.Errorf("%w: amount must not exceed what the payment took, %s", ErrInvalid, payment.CapturedAmount().AmountString())
	}
	if err := validExternalRefundID(external); err != nil {
		return Refund{}, err
	}
	return Refund{
		PaymentID:        payment.ID,
		Amount:           amount,
		Provider:         payment.Charge.Provider,
		ExternalRefundID: external,
		Status:           RefundPending,
	}, nil
}

// validExternalRefundID accepts 1 to MaxExternalRefundIDLength printable
// ASCII characters, as the API takes an externalPaymentId. ASCII keeps one
// byte one character, so the column's length CHECK and this agree, and the
// id travels in the provider's idempotency key, an HTTP header, unharmed.
func validExternalRefundID(external ExternalRefundID) error {
	if len(external) == 0 || len(external) > MaxExternalRefundIDLength {
		return fmt.Errorf("%w: externalRefundId must be 1 to %d characters", ErrInvalid, MaxExternalRefundIDLength)
	}
	for i := 0; i < len(external); i++ {
		if external[i] < 0x20 || external[i] > 0x7e {
			return fmt.Errorf("%w: externalRefundId must be printable ASCII", ErrInvalid)
		}
	}
	return nil
}

// IsSameRefund reports whether o describes this very refund: R-DIST-IDEM-4
// for refunds, a new idempotency key for a known external refund gets the
// existing refund only when it is the same refund; anything else is a
// conflict, never a second row.
func (r Refund) IsSameRefund(o Refund) bool {
	return r.PaymentID == o.PaymentID &&
		r.Amount.Equal(o.Amount) &&
		r.Provider == o.Provider &&
		r.ExternalRefundID == o.ExternalRefundID
}

// refundKeyPrefix starts every refund's provider key. A charge's key starts
// with its provider's name, and provider names are the adapters' own
// ("sandbox"; the API accepts only configured ones), none of them "refund":
// so no refund's key equals a charge's, and the two commands can never be
// answered with each other's result by a provider that keeps one key space
// for both. Name no provider "refund".
const refundKeyPrefix = "refund:"

// ProviderIdempotencyKey is the key this service sends to the provider for
// the refund. Like Charge.ProviderIdempotencyKey it is derived from the
// business operation (provider + external refund id), not from the client's
// key, so every attempt at this refund, whatever key it came with, is
// refunded once.
func (r Refund) ProviderIdempotencyKey() string {
	return refundKeyPrefix + string(r.Provider) + ":" + string(r.ExternalRefundID)
}

// ExternalRefundOfProviderKey is the external refund whose refund at
// provider has the provider key key (ProviderIdempotencyKey's inverse), as
// ExternalPaymentOfProviderKey is for a charge. ok is false for a key that
// is not a refund's at provider.
func ExternalRefundOfProviderKey(provider ProviderName, key string) (external ExternalRefundID, ok bool) {
	rest, ok := strings.CutPrefix(key, refundKeyPrefix+string(provider)+":")
	if !ok || rest == "" {
		return "", false
	}
	return ExternalRefundID(rest), true
}

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
