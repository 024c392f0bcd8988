package app

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

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
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
