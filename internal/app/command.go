package app

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// ChargeCommand is a client's request to charge, with its idempotency key.
type ChargeCommand struct {
	// Scope is the client and the idempotency key the command came with.
	Scope IdempotencyScope
	// Charge is the validated charge: order, customer, amount, currency,
	// provider and external payment.
	Charge domain.Charge
	// Operation names the endpoint, such as "POST /payments"; it is part of
	// the command hash, so one key cannot be shared between endpoints.
	Operation string
}

// Hash is the command_hash of R-DIST-IDEM-3: SHA-256 over a canonical form
// of the validated command. The form is built from parsed values, not from
// the request bytes, so reordered JSON keys, whitespace or "100.5" versus
// "100.50" are the same command. Each field is length-prefixed so no two
// different commands can produce the same form.
func (c ChargeCommand) Hash() string {
	amount := c.Charge.Amount.Amount()
	fields := []string{
		"v1",
		c.Operation,
		strconv.FormatInt(int64(c.Charge.OrderID), 10),
		strconv.FormatInt(int64(c.Charge.CustomerID), 10),
		amount.String(), // canonical: no trailing zeros
		string(c.Charge.Amount.Currency()),
		string(c.Charge.Provider),
		string(c.Charge.ExternalPaymentID),
	}
	return canonicalHash(fields)
}

// canonicalHash is SHA-256 over fields, each length-prefixed, so that no
// two different lists of fields give the same form. Every command hashes
// through it (ChargeCommand.Hash, RefundCommand.Hash).
func canonicalHash(fields []string) string {
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

// RefundCommand is a client's request to refund part or all of one of its
// payments, with its idempotency key.
type RefundCommand struct {
	// Scope is the client and the idempotency key the command came with.
	Scope IdempotencyScope
	// PaymentID is the payment to refund (the path's id).
	PaymentID domain.PaymentID
	// Amount is how much to give back, in the payment's currency; the
	// request carries no currency of its own.
	Amount decimal.Decimal
	// ExternalRefundID is the client's id for this refund: the second layer.
	ExternalRefundID domain.ExternalRefundID
	// Operation names the endpoint, OperationRefundPayment.
	Operation string
}

// Hash is the refund's command_hash, over the same canonical, length-
// prefixed form as ChargeCommand.Hash (its own version tag, so no refund's
// form can equal a charge's).
func (c RefundCommand) Hash() string {
	return canonicalHash([]string{
		"refund-v1",
		c.Operation,
		strconv.FormatInt(int64(c.PaymentID), 10),
		c.Amount.String(), // canonical: no trailing zeros
		string(c.ExternalRefundID),
	})
}
