package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/strictjson"
)

// The saga transport's wire format (api/asyncapi.yaml, payment.commands and
// payment.replies): the commands an orchestrator sends, and the replies
// the service answers them with.

// Command types on payment.commands.
const (
	// EventTypeChargeOrder is a charge step.
	EventTypeChargeOrder = "ChargeOrder.v1"
	// EventTypeCompensateCharge is the compensation of a charge step.
	EventTypeCompensateCharge = "CompensateCharge.v1"
)

// sagaCommand is one decoded command: a charge or a compensation.
type sagaCommand struct {
	charge     *app.SagaCharge
	compensate *app.SagaCompensation
	msg        kafka.Message // the record that carried it
}

// step is the command's step.
func (c sagaCommand) step() app.SagaStep {
	if c.charge != nil {
		return c.charge.Step
	}
	return c.compensate.Step
}

// sagaPoison is a command that cannot be carried out, and the step it
// names if that much could be read (then it is answered failed too).
type sagaPoison struct {
	*PoisonError
	eventID uuid.UUID // uuid.Nil when unreadable
	step    *app.SagaStep
}

// decodeSagaCommand parses and validates one command. Member names match
// exactly, and a name repeated in one object is refused, as for the order
// events (parseWire says why).
func decodeSagaCommand(value []byte) (sagaCommand, *sagaPoison) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil {
		return sagaCommand{}, &sagaPoison{PoisonError: &PoisonError{Reason: ReasonInvalidJSON, Detail: err.Error()}}
	}
	if dups := strictjson.DuplicateKeys(value); len(dups) > 0 {
		return sagaCommand{}, &sagaPoison{PoisonError: &PoisonError{Reason: ReasonDuplicateKey,
			Detail: strings.Join(dups, ", ") + " appears more than once in the command; readers disagree on which value counts"}}
	}
	bad := &sagaPoison{}
	fail := func(reason, format string, args ...any) (sagaCommand, *sagaPoison) {
		bad.PoisonError = &PoisonError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
		return sagaCommand{}, bad
	}
	// What names the step first, so that a failed reply can name it.
	eventID, err := parseUUID(m["eventId"])
	if err == nil && eventID != uuid.Nil {
		bad.eventID = eventID
	}
	sagaID, sagaErr := parseUUID(m["sagaId"])
	var name string
	nameErr := json.Unmarshal(m["stepName"], &name)
	if sagaErr != nil || sagaID == uuid.Nil {
		return fail(ReasonInvalidField, "sagaId must be a UUID, got %s", show(m["sagaId"]))
	}
	step, err := app.NewSagaStep(sagaID, name)
	if nameErr != nil || err != nil {
		return fail(ReasonInvalidField, "stepName must be a string of 1 to %d printable ASCII characters, got %s", app.MaxSagaStepName, show(m["stepName"]))
	}
	bad.step = &step
	if bad.eventID == uuid.Nil {
		return fail(ReasonInvalidEventID, "eventId must be a UUID, got %s", show(m["eventId"]))
	}
	if _, err := parseOccurredAt(m["occurredAt"]); err != nil {
		return fail(ReasonInvalidField, "occurredAt %v", err)
	}
	var eventType string
	_ = json.Unmarshal(m["eventType"], &eventType)
	switch eventType {
	case EventTypeChargeOrder:
		charge, poison := decodeCharge(m)
		if poison != nil {
			bad.PoisonError = poison
			return sagaCommand{}, bad
		}
		return sagaCommand{charge: &app.SagaCharge{EventID: eventID, Step: step, Charge: charge}}, nil
	case EventTypeCompensateCharge:
		var compensates string
		if err := json.Unmarshal(m["compensates"], &compensates); err != nil {
			return fail(ReasonInvalidField, "compensates must be the stepName of a charge step, got %s", show(m["compensates"]))
		}
		if _, err := app.NewSagaStep(sagaID, compensates); err != nil {
			return fail(ReasonInvalidField, "compensates must be the stepName of a charge step, got %s", show(m["compensates"]))
		}
		return sagaCommand{compensate: &app.SagaCompensation{EventID: eventID, Step: step, Compensates: compensates}}, nil
	default:
		return fail(ReasonUnknownEventType, "eventType %s is neither %s nor %s", show(m["eventType"]), EventTypeChargeOrder, EventTypeCompensateCharge)
	}
}

// decodeCharge reads a ChargeOrder.v1's business fields.
func decodeCharge(m map[string]json.RawMessage) (domain.Charge, *PoisonError) {
	orderID, err := parsePositiveInt(m["orderId"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "orderId " + err.Error()}
	}
	customerID, err := parsePositiveInt(m["customerId"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "customerId " + err.Error()}
	}
	var currency, provider, external string
	if err := json.Unmarshal(m["currency"], &currency); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "currency must be a string, got " + show(m["currency"])}
	}
	if len(m["amount"]) == 0 || m["amount"][0] != '"' {
		// A decimal string, as in the HTTP API: a JSON number passes
		// through a float in many producers.
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: "amount must be a decimal string, got " + show(m["amount"])}
	}
	amount, err := parseAmount(m["amount"])
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: "amount " + err.Error()}
	}
	money, err := domain.NewMoney(amount, domain.Currency(currency))
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidAmount, Detail: err.Error()}
	}
	if err := json.Unmarshal(m["paymentProvider"], &provider); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "paymentProvider must be a string, got " + show(m["paymentProvider"])}
	}
	if err := json.Unmarshal(m["externalPaymentId"], &external); err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "externalPaymentId must be a string, got " + show(m["externalPaymentId"])}
	}
	charge, err := domain.NewCharge(domain.OrderID(orderID), domain.CustomerID(customerID), money,
		domain.ProviderName(provider), domain.ExternalPaymentID(external))
	if err != nil {
		return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: err.Error()}
	}
	// Optional: absent is automatic, a one-step charge, as it was before
	// a step could authorize.
	if raw, ok := m["captureMethod"]; ok {
		var method string
		if err := json.Unmarshal(raw, &method); err != nil || (method != string(domain.CaptureAutomatic) && method != string(domain.CaptureManual)) {
			return domain.Charge{}, &PoisonError{Reason: ReasonInvalidField, Detail: "captureMethod must be automatic or manual, got " + show(raw)}
		}
		if method == string(domain.CaptureManual) {
			charge.CaptureMethod = domain.CaptureManual
		}
	}
	return charge, nil
}

// parseOccurredAt reads an RFC 3339 time. A command's occurredAt orders
// nothing (its step's identity does that), so only its form is checked.
func parseOccurredAt(raw json.RawMessage) (time.Time, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 string, got %s", show(raw))
	}
	return time.Parse(time.RFC3339Nano, s)
}

// sagaReplyV1 is the value of every reply on payment.replies: the wire
// contract with the orchestrators (api/asyncapi.yaml). A field a reply
// type does not carry is absent. Add optional fields only; anything else is
// a new reply type (.v2).
type sagaReplyV1 struct {
	EventID       uuid.UUID `json:"eventId"`
	EventType     string    `json:"eventType"`
	SagaID        uuid.UUID `json:"sagaId"`
	StepName      string    `json:"stepName"`
	OccurredAt    time.Time `json:"occurredAt"`
	PaymentID     int64     `json:"paymentId,omitempty"`
	OrderID       int64     `json:"orderId,omitempty"`
	Amount        *string   `json:"amount,omitempty"`
	Currency      string    `json:"currency,omitempty"`
	Code          string    `json:"code,omitempty"`
	Detail        string    `json:"detail,omitempty"`
	Compensates   string    `json:"compensates,omitempty"`
	CompensatedBy string    `json:"compensatedBy,omitempty"`
	RefundID      int64     `json:"refundId,omitempty"`
	Voided        bool      `json:"voided,omitempty"`
}

// replyStatus is the stored status of every reply: a reply has no HTTP
// status, and its key is never an HTTP request's.
const replyStatus = http.StatusOK

// SagaReplies implements app.SagaReplies: a reply's stored response is its
// message value, byte for byte.
type SagaReplies struct{}

// carriesAmount: the reply types with an amount.
func carriesAmount(t app.SagaReplyType) bool {
	return t == app.ReplyCharged || t == app.ReplyAuthorized || t == app.ReplyDeclined || t == app.ReplyCompensated
}

func (SagaReplies) EncodeSagaReply(r app.SagaReply) (app.StoredResponse, error) {
	v := sagaReplyV1{
		EventID: r.EventID, EventType: string(r.Type), SagaID: r.Step.SagaID, StepName: r.Step.Name,
		OccurredAt: r.OccurredAt.UTC(), PaymentID: int64(r.PaymentID), OrderID: int64(r.OrderID),
		Code: r.Code, Detail: r.Detail, Compensates: r.Compensates, CompensatedBy: r.CompensatedBy, RefundID: int64(r.RefundID),
		Voided: r.Voided,
	}
	if carriesAmount(r.Type) {
		amount := "0"
		if r.Amount.IsPositive() {
			m, err := domain.NewMoney(r.Amount, r.Currency)
			if err != nil {
				return app.StoredResponse{}, fmt.Errorf("encode %s: %w", r.Type, err)
			}
			amount, v.Currency = m.AmountString(), string(r.Currency)
		}
		v.Amount = &amount
	}
	body, err := json.Marshal(v)
	if err != nil {
		return app.StoredResponse{}, fmt.Errorf("encode %s: %w", r.Type, err)
	}
	return app.StoredResponse{StatusCode: replyStatus, Body: body,
		Publish: &app.Publication{EventID: r.EventID, EventType: string(r.Type), Key: r.Step.SagaID.String()}}, nil
}

func (SagaReplies) DecodeSagaReply(stored app.StoredResponse) (app.SagaReply, app.StoredResponse, error) {
	var v sagaReplyV1
	if err := json.Unmarshal(stored.Body, &v); err != nil {
		return app.SagaReply{}, app.StoredResponse{}, fmt.Errorf("decode a stored reply: %w", err)
	}
	if v.EventID == uuid.Nil || v.EventType == "" {
		return app.SagaReply{}, app.StoredResponse{}, errors.New("decode a stored reply: it is not a saga reply")
	}
	r := app.SagaReply{
		EventID: v.EventID, Type: app.SagaReplyType(v.EventType), Step: app.SagaStep{SagaID: v.SagaID, Name: v.StepName},
		PaymentID: domain.PaymentID(v.PaymentID), OrderID: domain.OrderID(v.OrderID), Currency: domain.Currency(v.Currency),
		Code: v.Code, Detail: v.Detail, Compensates: v.Compensates, CompensatedBy: v.CompensatedBy,
		RefundID: domain.RefundID(v.RefundID), Voided: v.Voided, OccurredAt: v.OccurredAt,
	}
	if v.Amount != nil {
		amount, err := decimal.NewFromString(*v.Amount)
		if err != nil {
			return app.SagaReply{}, app.StoredResponse{}, fmt.Errorf("decode a stored reply's amount: %w", err)
		}
		r.Amount = amount
	}
	stored.Publish = &app.Publication{EventID: v.EventID, EventType: v.EventType, Key: v.SagaID.String()}
	return r, stored, nil
}

var _ app.SagaReplies = SagaReplies{}
