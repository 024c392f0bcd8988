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
}

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
)

// Final reports whether the payment's outcome is settled: the provider has
// decided it, or refused it for good.
func (s PaymentStatus) Final() bool {
	return s == PaymentSucceeded || s == PaymentDeclined || s == PaymentFailed
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
		p.Charge.ExternalPaymentID == c.ExternalPaymentID
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
