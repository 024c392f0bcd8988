package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// The payment step of an order saga: the style guide's third transport,
// deduplicated on (sagaId, stepName), the id the orchestrator knows
// (R-DIST-IDEM-1). A step moves money through the same core as an HTTP
// command, under a key of its own (SagaStepScope), and is answered by a
// reply on a topic (SagaReplies) instead of an HTTP response. What the
// core's records do not hold, the saga's own table does (SagaStore): what
// each step is, the tombstone a compensation leaves before its step, a
// compensation's refund and whether it waits for its step (decision 0029).

// MaxSagaStepName bounds a step's name, as the saga_step table does.
const MaxSagaStepName = 100

// SagaStep names one step of a saga.
type SagaStep struct {
	// SagaID is the saga, as the orchestrator names it.
	SagaID uuid.UUID
	// Name is the step's name in the saga, such as charge-payment.
	Name string
}

// NewSagaStep validates a step's name: 1 to MaxSagaStepName printable
// ASCII characters.
func NewSagaStep(saga uuid.UUID, name string) (SagaStep, error) {
	if saga == uuid.Nil {
		return SagaStep{}, fmt.Errorf("%w: sagaId is empty", domain.ErrInvalid)
	}
	if err := validStepName("stepName", name); err != nil {
		return SagaStep{}, err
	}
	return SagaStep{SagaID: saga, Name: name}, nil
}

func validStepName(field, name string) error {
	if len(name) == 0 || len(name) > MaxSagaStepName {
		return fmt.Errorf("%w: %s must be 1 to %d characters", domain.ErrInvalid, field, MaxSagaStepName)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("%w: %s must be printable ASCII", domain.ErrInvalid, field)
		}
	}
	return nil
}

// Operations of the saga's commands, part of their command hash as an
// HTTP command's endpoint is.
const (
	// OperationSagaCharge is a ChargeOrder.v1 step.
	OperationSagaCharge = "saga ChargeOrder.v1"
	// OperationSagaCompensation is a CompensateCharge.v1 step.
	OperationSagaCompensation = "saga CompensateCharge.v1"
)

// SagaKeyPrefix starts every saga step's idempotency key. "§" is not
// printable ASCII, which every HTTP Idempotency-Key is, so no request can
// ever name a step's key, whichever client it comes from.
const SagaKeyPrefix = "§saga:"

// sagaKeySeparator parts a compensation's step from the step it
// compensates in its key; like the prefix, no step name can hold it.
const sagaKeySeparator = "§"

// SagaStepScope is a charge step's idempotency key: its client and
// (sagaId, stepName).
func SagaStepScope(client domain.ClientID, step SagaStep) IdempotencyScope {
	return IdempotencyScope{ClientID: client, Key: SagaKeyPrefix + step.SagaID.String() + ":" + step.Name}
}

// SagaCompensationScope is a compensation's idempotency key: its own step
// and the step it compensates, which its reply names.
func SagaCompensationScope(client domain.ClientID, step SagaStep, compensates string) IdempotencyScope {
	scope := SagaStepScope(client, step)
	scope.Key += sagaKeySeparator + compensates
	return scope
}

// SagaStepOf reads a saga step's key: the step, and for a compensation the
// step it compensates; ok is false for any other key.
func SagaStepOf(scope IdempotencyScope) (step SagaStep, compensates string, ok bool) {
	rest, ok := strings.CutPrefix(scope.Key, SagaKeyPrefix)
	if !ok || len(rest) < 38 || rest[36] != ':' {
		return SagaStep{}, "", false
	}
	saga, err := uuid.Parse(rest[:36])
	if err != nil {
		return SagaStep{}, "", false
	}
	name, compensates, _ := strings.Cut(rest[37:], sagaKeySeparator)
	return SagaStep{SagaID: saga, Name: name}, compensates, name != ""
}

// SagaReplyType is what a step ended in, as its reply's type says.
type SagaReplyType string

// The reply types. The suffix is the payload's version.
const (
	// ReplyCharged: the step charged the order.
	ReplyCharged SagaReplyType = "PaymentStepCharged.v1"
	// ReplyAuthorized: the step (captureMethod manual) authorized the
	// order's payment: the provider holds the amount, taken by a capture
	// or released by the step's compensation.
	ReplyAuthorized SagaReplyType = "PaymentStepAuthorized.v1"
	// ReplyDeclined: the provider declined the charge.
	ReplyDeclined SagaReplyType = "PaymentStepDeclined.v1"
	// ReplyFailed: the step failed with a problem code; nothing was charged
	// by it (or, for a compensation, nothing was given back by it).
	ReplyFailed SagaReplyType = "PaymentStepFailed.v1"
	// ReplyCompensated: the compensation gave back Amount (may be zero).
	ReplyCompensated SagaReplyType = "PaymentStepCompensated.v1"
	// ReplyCancelled: the step came after its compensation, and moved no
	// money.
	ReplyCancelled SagaReplyType = "PaymentStepCancelled.v1"
	// ReplyRejected: the step's (sagaId, stepName) names another command.
	ReplyRejected SagaReplyType = "PaymentStepRejected.v1"
)

// SagaReply is a step's reply before it is rendered.
type SagaReply struct {
	// EventID is the reply's eventId, a UUID v7 made once: a re-published
	// reply carries it again.
	EventID uuid.UUID
	// Type is what the step ended in.
	Type SagaReplyType
	// Step is the step answered.
	Step SagaStep
	// PaymentID and OrderID name the payment, when there is one.
	PaymentID domain.PaymentID
	// OrderID is the payment's order.
	OrderID domain.OrderID
	// Amount is what was charged or held (charged, authorized, declined)
	// or given back (compensated); Currency its currency, empty when
	// nothing was charged.
	Amount decimal.Decimal
	// Currency is Amount's currency.
	Currency domain.Currency
	// Code and Detail say why a step failed or was rejected.
	Code string
	// Detail is Code in words.
	Detail string
	// Compensates is the charge step a compensation undid.
	Compensates string
	// CompensatedBy is the compensation a cancelled step came after.
	CompensatedBy string
	// RefundID is the compensation's refund, when one was made.
	RefundID domain.RefundID
	// Voided: the compensated step's hold was released by a void (its
	// compensation's, or one made before it); nothing was taken.
	Voided bool
	// OccurredAt is when the step's outcome was recorded, in UTC.
	OccurredAt time.Time
}

// newSagaReply starts a reply with a fresh eventId.
func newSagaReply(typ SagaReplyType, step SagaStep) SagaReply {
	id, err := uuid.NewV7()
	if err != nil { // the clock or the random source failed: take a v4
		id = uuid.New()
	}
	return SagaReply{EventID: id, Type: typ, Step: step, OccurredAt: time.Now().UTC()}
}

// failedReply is a step's failure with a problem code.
func failedReply(step SagaStep, code, detail string) SagaReply {
	r := newSagaReply(ReplyFailed, step)
	r.Code, r.Detail = code, detail
	return r
}

// Problem codes of the replies, as the HTTP API names the same problems.
const (
	SagaCodeOrderNotFound           = "order-not-found"
	SagaCodeOrderMismatch           = "order-mismatch"
	SagaCodePaymentFailed           = "payment-failed"
	SagaCodeOrderAlreadyPaid        = "order-already-paid"
	SagaCodeExternalPaymentConflict = "external-payment-conflict"
	SagaCodeUnknownProvider         = "unknown-provider"
	SagaCodeInvalidCommand          = "invalid-command"
	SagaCodeRefundDeclined          = "refund-declined"
	SagaCodeRefundFailed            = "refund-failed"
	SagaCodeVoidDeclined            = "void-declined"
	SagaCodeVoidFailed              = "void-failed"
	SagaCodeStepReused              = "step-reused"
)

// SagaReplies renders replies into the responses stored for the steps'
// keys, and reads them back: the Kafka adapter implements it.
type SagaReplies interface {
	// EncodeSagaReply returns the stored response of a reply: the exact
	// message value, with the Publication that carries it.
	EncodeSagaReply(SagaReply) (StoredResponse, error)
	// DecodeSagaReply reads a stored reply back, Publication included.
	DecodeSagaReply(StoredResponse) (SagaReply, StoredResponse, error)
}

// WithSagaReplies makes the saga's steps a transport of the core's: a
// command that comes through a saga's operation (OperationSagaCharge,
// OperationSagaCompensation) is answered by the reply its outcome gets,
// rendered by r, instead of an HTTP response.
func WithSagaReplies(r SagaReplies) CoreOption {
	return WithTransport(sagaTransport{r}, OperationSagaCharge, OperationSagaCompensation)
}

// sagaTransport answers a step's command: its outcome's reply, for the
// step its key names (SagaStepScope, SagaCompensationScope), stored and
// published with the outcome.
type sagaTransport struct{ replies SagaReplies }

// stepOf is the step scope names, and the step a compensation compensates.
func stepOf(scope IdempotencyScope) (SagaStep, string, error) {
	step, compensates, ok := SagaStepOf(scope)
	if !ok {
		return SagaStep{}, "", fmt.Errorf("the key %q names no saga step", scope.Key)
	}
	return step, compensates, nil
}

// EncodeChargeOutcome answers a charge step.
func (t sagaTransport) EncodeChargeOutcome(scope IdempotencyScope, o ChargeOutcome) (StoredResponse, error) {
	step, _, err := stepOf(scope)
	if err != nil {
		return StoredResponse{}, err
	}
	return t.replies.EncodeSagaReply(chargeReply(step, o))
}

// EncodeRefundOutcome answers a compensation that refunded. A refund the
// provider only received has no reply yet: the reply says the outcome, so
// the key waits for the settlement (ErrAnswerAwaitsSettlement).
func (t sagaTransport) EncodeRefundOutcome(scope IdempotencyScope, o RefundOutcome) (StoredResponse, error) {
	if o.Kind == RefundReceived {
		return StoredResponse{}, ErrAnswerAwaitsSettlement
	}
	step, compensates, err := stepOf(scope)
	if err != nil {
		return StoredResponse{}, err
	}
	return t.replies.EncodeSagaReply(compensationReply(step, compensates, o))
}

// EncodeTransitionOutcome answers a compensation that voided an
// authorized step's hold; a saga captures nothing. A void the provider
// only received has no reply yet, as a refund's.
func (t sagaTransport) EncodeTransitionOutcome(scope IdempotencyScope, o TransitionOutcome) (StoredResponse, error) {
	if o.Kind == TransitionReceived {
		return StoredResponse{}, ErrAnswerAwaitsSettlement
	}
	step, compensates, err := stepOf(scope)
	if err != nil {
		return StoredResponse{}, err
	}
	if o.Transition.Kind != domain.TransitionVoid {
		return StoredResponse{}, fmt.Errorf("a saga step makes no %s", o.Transition.Kind)
	}
	return t.replies.EncodeSagaReply(voidReply(step, compensates, o))
}

// chargeReply is the reply a charge step's outcome is answered with.
func chargeReply(step SagaStep, o ChargeOutcome) SagaReply {
	var r SagaReply
	switch o.Kind {
	case ChargeSucceeded, ChargeAlreadyRecorded:
		if o.Payment.Charge.Manual() {
			r = newSagaReply(ReplyAuthorized, step)
		} else {
			r = newSagaReply(ReplyCharged, step)
		}
	case ChargeDeclined:
		r = newSagaReply(ReplyDeclined, step)
	case ChargeFailed:
		r = failedReply(step, SagaCodePaymentFailed, "the provider refused the charge for good and holds no charge for it")
	case ChargeOrderAlreadyPaid:
		return failedReply(step, SagaCodeOrderAlreadyPaid, "the order is already paid under another external payment")
	default:
		return failedReply(step, SagaCodeExternalPaymentConflict, "the externalPaymentId is recorded for another charge")
	}
	r.PaymentID, r.OrderID = o.Payment.ID, o.Payment.Charge.OrderID
	r.Amount, r.Currency = o.Payment.Charge.Amount.Amount(), o.Payment.Charge.Amount.Currency()
	return r
}

// compensationReply is the reply a compensation's refund is answered with.
func compensationReply(step SagaStep, compensates string, o RefundOutcome) SagaReply {
	var r SagaReply
	switch o.Kind {
	case RefundSucceeded, RefundAlreadyRecorded:
		r = newSagaReply(ReplyCompensated, step)
		r.Amount, r.Currency, r.RefundID = o.Refund.Amount.Amount(), o.Refund.Amount.Currency(), o.Refund.ID
	case RefundDeclined:
		r = failedReply(step, SagaCodeRefundDeclined, "the provider declined the refund: the charge stands")
	case RefundFailed:
		r = failedReply(step, SagaCodeRefundFailed, "the provider refused the refund for good: the charge stands")
	default:
		r = failedReply(step, SagaCodeExternalPaymentConflict, "the compensation's refund id is recorded for another refund")
	}
	r.Compensates, r.PaymentID = compensates, o.Refund.PaymentID
	return r
}

// compensatedWith is a compensation's reply when it gave amount back
// without a refund of its own (zero: nothing was charged).
func compensatedWith(step SagaStep, compensates string) SagaReply {
	r := newSagaReply(ReplyCompensated, step)
	r.Compensates, r.Amount = compensates, decimal.Zero
	return r
}

// releasedReply is the reply of a compensation whose step's hold was
// released without a capture: by a void (voided), or by its lapse at the
// provider. Nothing was taken, so nothing is given back.
func releasedReply(step SagaStep, compensates string, payment domain.PaymentID, voided bool) SagaReply {
	r := compensatedWith(step, compensates)
	r.PaymentID, r.Voided = payment, voided
	return r
}

// voidReply is the reply a compensation's void is answered with: an
// authorized step's compensation releases the hold instead of refunding.
func voidReply(step SagaStep, compensates string, o TransitionOutcome) SagaReply {
	switch o.Kind {
	case TransitionSucceeded:
		return releasedReply(step, compensates, o.Payment.ID, true)
	case TransitionDeclined:
		r := failedReply(step, SagaCodeVoidDeclined, "the provider declined the void: the authorization still holds the money")
		r.Compensates, r.PaymentID = compensates, o.Payment.ID
		return r
	default:
		r := failedReply(step, SagaCodeVoidFailed, "the provider refused the void for good: the authorization was not released by it")
		r.Compensates, r.PaymentID = compensates, o.Payment.ID
		return r
	}
}

// SagaStepKind is what a saga_step row is.
type SagaStepKind string

const (
	// StepCharge is a ChargeOrder.v1 step.
	StepCharge SagaStepKind = "charge"
	// StepCompensation is a CompensateCharge.v1 step.
	StepCompensation SagaStepKind = "compensation"
	// StepTombstone is the name of a step whose compensation came first.
	StepTombstone SagaStepKind = "tombstone"
)

// SagaStepRecord is a step as the saga's table holds it.
type SagaStepRecord struct {
	// Step is the step's identity.
	Step SagaStep
	// Kind is what the step is.
	Kind SagaStepKind
	// ContentHash identifies the step's content: the charge's command
	// hash, or the compensated step's.
	ContentHash string
	// Compensates is the step a compensation undoes.
	Compensates string
	// PaymentID and RefundAmount are a compensation's refund, once fixed.
	PaymentID *domain.PaymentID
	// RefundAmount is what the compensation's refund gives back.
	RefundAmount *decimal.Decimal
	// Waiting: the compensation waits for its step's outcome.
	Waiting bool
}

// SagaStore is the saga_step table.
type SagaStore interface {
	// Begin records the step unless its (sagaId, stepName) is recorded,
	// and returns the row that stands: the new one (inserted) or the
	// existing one, whatever its kind. One statement: a concurrent Begin
	// or Tombstone of the same step waits for the other's commit.
	Begin(ctx context.Context, rec SagaStepRecord) (stands SagaStepRecord, inserted bool, err error)
	// Get reads a step; found is false when it is not recorded.
	Get(ctx context.Context, step SagaStep) (rec SagaStepRecord, found bool, err error)
	// FixRefund sets a compensation's refund unless it is set, and returns
	// the refund that stands.
	FixRefund(ctx context.Context, step SagaStep, payment domain.PaymentID, amount decimal.Decimal) (SagaStepRecord, error)
	// SetWaiting marks a compensation waiting for its step, or done.
	SetWaiting(ctx context.Context, step SagaStep, waiting bool) error
	// Waiting lists up to limit compensations waiting for their step, the
	// longest-waiting first.
	Waiting(ctx context.Context, limit int) ([]SagaStepRecord, error)
	// Unresolved counts the steps of client left without a reply for
	// longer than olderThan: their key claimed and not completed, or a
	// compensation waiting for its step.
	Unresolved(ctx context.Context, client domain.ClientID, olderThan time.Duration) (int, error)
}

// OutboxStore publishes a stored response again.
type OutboxStore interface {
	// Republish makes the relay publish the response's message again, with
	// its eventId: the outbox row made when it was stored is marked
	// unpublished, or made again if the purge took it.
	Republish(ctx context.Context, resp StoredResponse) error
}

// tombstoneHash is the content hash of a tombstone's row and of the
// cancelled reply stored under its step's key: no command hashes to it.
const tombstoneHash = "saga-tombstone"

// compensationHash identifies a compensation's content: the step it
// compensates.
func compensationHash(compensates string) string {
	return canonicalHash("saga-compensation-v1", compensates)
}

// compensationRefundID is a compensation's external refund id: one per
// compensation step, whatever it computes.
func compensationRefundID(step SagaStep) domain.ExternalRefundID {
	return domain.ExternalRefundID("saga:" + step.SagaID.String() + ":" + canonicalHash(step.Name)[:16])
}

// ErrSagaRetry: the step must be tried again later (the provider or the
// database is down, another payment of the order is in flight, the order
// is not in the projection yet). Nothing of it is stored. The error wraps
// what went wrong beside it, for errors.Is; ErrSagaRetry is the class to go
// by, whatever the cause.
var ErrSagaRetry = errors.New("the saga step is to be tried again")
