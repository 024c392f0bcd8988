package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// EventTypeOrderCreated is the only event type this consumer applies.
const EventTypeOrderCreated = "OrderCreated.v1"

// Poison reasons: the value of the error-code header on a dead-lettered
// record and the "reason" label of the dead-letter metric.
const (
	// ReasonInvalidJSON: the value is not one JSON object.
	ReasonInvalidJSON = "invalid-json"
	// ReasonInvalidEventID: no eventId, or not a UUID (R-DIST-IDEM-1).
	ReasonInvalidEventID = "invalid-event-id"
	// ReasonUnknownEventType: not an OrderCreated.v1.
	ReasonUnknownEventType = "unknown-event-type"
	// ReasonInvalidAmount: the amount is not a bounded decimal.
	ReasonInvalidAmount = "invalid-amount"
	// ReasonInvalidField: another field is missing or invalid.
	ReasonInvalidField = "invalid-field"
	// ReasonDuplicateKey: a member name repeated in one object.
	ReasonDuplicateKey = "duplicate-key"
	// ReasonInvalidTime: occurredAt too far ahead of the consumer's
	// clock, or before 2000.
	ReasonInvalidTime = "invalid-occurred-at"
	// ReasonRejected: the event decoded, but the database rejected it for
	// good (app.ErrDataRejected) on each of MaxAttempts attempts.
	ReasonRejected = "rejected-by-database"
)

// PoisonError says why a record can never be applied, however often it is
// retried: it goes to the dead-letter topic.
type PoisonError struct {
	// Reason is one of the Reason constants.
	Reason string
	// Detail says what was wrong, for the error header and the log.
	Detail string
}

// Error returns the reason and the detail.
func (e *PoisonError) Error() string { return e.Reason + ": " + e.Detail }

func poison(reason, format string, args ...any) error {
	return &PoisonError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// wireEvent is the JSON of an order event. Every field is raw so each can be
// checked and named on its own; unknown fields are ignored, so producers can
// add fields without breaking this consumer.
type wireEvent struct {
	EventID    json.RawMessage
	SagaID     json.RawMessage
	EventType  json.RawMessage
	OrderID    json.RawMessage
	CustomerID json.RawMessage
	Amount     json.RawMessage
	Currency   json.RawMessage
	OccurredAt json.RawMessage
}

// parseWire reads the members of an event object by their exact names.
// encoding/json would match struct fields case-insensitively, so
// {"orderId":1,"OrderId":2} would be order 2 here and order 1 to any
// case-sensitive reader of the topic; read from a map, "OrderId" is just an
// unknown field. A name repeated in one object, at any depth, is refused for
// the same reason: readers disagree on which value counts.
func parseWire(value []byte) (wireEvent, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil {
		return wireEvent{}, poison(ReasonInvalidJSON, "%v", err)
	}
	if dups := strictjson.DuplicateKeys(value); len(dups) > 0 {
		return wireEvent{}, poison(ReasonDuplicateKey, "%s appears more than once in the event; readers disagree on which value counts",
			strings.Join(dups, ", "))
	}
	return wireEvent{
		EventID:    m["eventId"],
		SagaID:     m["sagaId"],
		EventType:  m["eventType"],
		OrderID:    m["orderId"],
		CustomerID: m["customerId"],
		Amount:     m["amount"],
		Currency:   m["currency"],
		OccurredAt: m["occurredAt"],
	}, nil
}

// decoder turns record values into events. It is the only place that knows
// the wire format.
type decoder struct {
	defaultCurrency domain.Currency
	// maxSkew bounds how far ahead of now an event's occurredAt may be.
	maxSkew time.Duration
	now     func() time.Time
}

// earliestOccurredAt is the oldest occurredAt an order event can honestly
// carry: nothing in this system predates it, and a zero or epoch date is a
// producer bug (an unset field), not an order.
var earliestOccurredAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// decode parses and validates one record value. Any error is a *PoisonError.
func (d decoder) decode(value []byte) (app.OrderCreated, error) {
	w, err := parseWire(value)
	if err != nil {
		return app.OrderCreated{}, err
	}
	if isAbsent(w.EventID) && isAbsent(w.EventType) && isAbsent(w.OrderID) {
		return app.OrderCreated{}, poison(ReasonInvalidJSON, "not an order event object")
	}

	var e app.OrderCreated
	id, err := parseUUID(w.EventID)
	if err != nil || id == uuid.Nil {
		return app.OrderCreated{}, poison(ReasonInvalidEventID, "eventId must be a UUID, got %s", show(w.EventID))
	}
	e.EventID = id

	var eventType string
	if err := json.Unmarshal(w.EventType, &eventType); err != nil || eventType != EventTypeOrderCreated {
		return app.OrderCreated{}, poison(ReasonUnknownEventType, "eventType %s is not %s", show(w.EventType), EventTypeOrderCreated)
	}

	if !isAbsent(w.SagaID) {
		saga, err := parseUUID(w.SagaID)
		if err != nil {
			return app.OrderCreated{}, poison(ReasonInvalidField, "sagaId must be a UUID, got %s", show(w.SagaID))
		}
		e.SagaID = uuid.NullUUID{UUID: saga, Valid: true}
	}

	orderID, err := parsePositiveInt(w.OrderID)
	if err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidField, "orderId %v", err)
	}
	customerID, err := parsePositiveInt(w.CustomerID)
	if err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidField, "customerId %v", err)
	}

	currency := d.defaultCurrency
	if !isAbsent(w.Currency) {
		var s string
		if err := json.Unmarshal(w.Currency, &s); err != nil {
			return app.OrderCreated{}, poison(ReasonInvalidField, "currency must be a string, got %s", show(w.Currency))
		}
		if currency, err = domain.ParseCurrency(s); err != nil {
			return app.OrderCreated{}, poison(ReasonInvalidField, "currency: %v", err)
		}
	}
	amount, err := parseAmount(w.Amount)
	if err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidAmount, "amount %s: %v", show(w.Amount), err)
	}
	total, err := domain.NewMoney(amount, currency)
	if err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidAmount, "amount %s: %v", show(w.Amount), err)
	}
	if e.Order, err = domain.NewOrder(domain.OrderID(orderID), domain.CustomerID(customerID), total); err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidField, "%v", err)
	}

	var occurred string
	if err := json.Unmarshal(w.OccurredAt, &occurred); err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidField, "occurredAt must be an RFC 3339 string, got %s", show(w.OccurredAt))
	}
	at, err := time.Parse(time.RFC3339Nano, occurred)
	if err != nil {
		return app.OrderCreated{}, poison(ReasonInvalidField, "occurredAt: %v", err)
	}
	// The projection keeps each order's newest event by occurredAt, so an
	// event dated in the future would win over every real event of its
	// order until that date (one dated 2999 would freeze the order for
	// good). Beyond the allowed clock skew it is poison; replayed from the
	// dead-letter topic once its date has come, it applies. Checked at
	// decode, by this consumer's clock.
	if limit := d.now().Add(d.maxSkew); at.After(limit) {
		return app.OrderCreated{}, poison(ReasonInvalidTime, "occurredAt %s is more than %s ahead of the consumer's clock (%s)",
			occurred, d.maxSkew, d.now().UTC().Format(time.RFC3339))
	}
	if at.Before(earliestOccurredAt) {
		return app.OrderCreated{}, poison(ReasonInvalidTime, "occurredAt %s is before %s", occurred, earliestOccurredAt.Format(time.DateOnly))
	}
	// PostgreSQL keeps microseconds; comparing versions at any finer
	// precision in Go would disagree with the stored row (the projection's
	// last_event_at, which the upsert compares).
	e.OccurredAt = at.UTC().Truncate(time.Microsecond)
	return e, nil
}

// isAbsent reports a missing field or an explicit null.
func isAbsent(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func parseUUID(raw json.RawMessage) (uuid.UUID, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return uuid.Nil, err
	}
	// uuid.Parse also takes braces and urn: forms; the wire format is the
	// canonical 36 characters only.
	if len(s) != 36 {
		return uuid.Nil, errors.New("not a canonical UUID")
	}
	return uuid.Parse(s)
}

func parsePositiveInt(raw json.RawMessage) (int64, error) {
	if isAbsent(raw) {
		return 0, errors.New("is required")
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n <= 0 {
		return 0, fmt.Errorf("must be a positive integer, got %s", show(raw))
	}
	return n, nil
}

// Bounds on an amount's text, checked before any decimal arithmetic. The
// longest value numeric(19,4) holds is 20 characters
// ("123456789012345.1234"); 40 leaves room for trailing zeros and an
// exponent. Two exponent digits cover everything BigDecimal.toString writes
// for such values (1E+3, 1.5E-7).
const (
	maxAmountText     = 40
	maxExponentDigits = 2
)

// parseAmount takes a JSON number or a decimal string, straight from its
// text into a decimal: the value never passes through a float, so 100.10
// stays 100.10.
//
// The event contract allows a JSON number for money (the API does not):
// the style guide's OrderCreatedEvent carries a Java BigDecimal, which
// Jackson writes as a number by default, sometimes with an exponent (1E+3
// after stripTrailingZeros). Since the text is parsed as a decimal, a
// number loses nothing. What it could do is cost: a decimal's digit checks
// take time in its number of digits, which an exponent multiplies ("1e-10000"
// is 8 bytes and ten thousand fraction digits, about 110 ms; 500 of them
// stalled a batch for a minute). So the text is bounded first: at most
// maxAmountText characters, the grammar of a JSON number (a sign, digits, a
// point, an exponent of at most maxExponentDigits digits) whether it came
// as a number or in a string. BenchmarkDecodeHostileAmount shows the worst
// case is as cheap as a valid event.
func parseAmount(raw json.RawMessage) (decimal.Decimal, error) {
	if isAbsent(raw) {
		return decimal.Decimal{}, errors.New("is required")
	}
	if len(raw) > maxAmountText+2 { // a string's quotes
		return decimal.Decimal{}, fmt.Errorf("is longer than %d characters", maxAmountText)
	}
	text := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return decimal.Decimal{}, err
		}
	} else if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return decimal.Decimal{}, errors.New("must be a number or a decimal string")
	}
	if err := checkAmountText(text); err != nil {
		return decimal.Decimal{}, err
	}
	d, err := decimal.NewFromString(text)
	if err != nil {
		return decimal.Decimal{}, errors.New("is not a decimal number")
	}
	return d, nil
}

// checkAmountText accepts -?digits(.digits)?([eE][+-]?digits)? with at most
// maxAmountText characters and maxExponentDigits exponent digits.
func checkAmountText(s string) error {
	if len(s) > maxAmountText {
		return fmt.Errorf("is longer than %d characters", maxAmountText)
	}
	mantissa, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	mantissa = strings.TrimPrefix(mantissa, "-")
	intPart, frac, hasPoint := strings.Cut(mantissa, ".")
	if !allDigits(intPart) || hasPoint && !allDigits(frac) {
		return errors.New("is not a decimal number")
	}
	if hasExp {
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		if !allDigits(exp) || len(exp) > maxExponentDigits {
			return fmt.Errorf("must have an exponent of 1 to %d digits", maxExponentDigits)
		}
	}
	return nil
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// show quotes a raw JSON value for an error message, shortened.
func show(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	if len(raw) > 64 {
		return string(raw[:64]) + "..."
	}
	return string(raw)
}
