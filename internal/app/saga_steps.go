package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// SagaCharge is a ChargeOrder.v1 command: charge the order, as the saga's
// step.
type SagaCharge struct {
	// EventID is the command's eventId: a re-sent command may carry a new
	// one, so the step's identity is Step, never this.
	EventID uuid.UUID
	// Step is the step's identity.
	Step SagaStep
	// Charge is what to charge.
	Charge domain.Charge
}

// SagaCompensation is a CompensateCharge.v1 command: undo a charge step.
type SagaCompensation struct {
	// EventID is the command's eventId.
	EventID uuid.UUID
	// Step is the compensation's own identity.
	Step SagaStep
	// Compensates is the name of the charge step it undoes.
	Compensates string
}

// SagaOutcome says how a step's command was answered.
type SagaOutcome string

const (
	// SagaReplied: the step's reply is stored and on its way (a new
	// outcome, or a re-sent step's reply published again).
	SagaReplied SagaOutcome = "replied"
	// SagaPending: the step is durably claimed and its outcome is not
	// known yet (a lost provider answer, a claim held by another attempt,
	// a compensation waiting for its step): the reply comes when it is
	// settled, from whoever settles it.
	SagaPending SagaOutcome = "pending"
)

// SagaResult is what answering a step's command did.
type SagaResult struct {
	// Outcome is replied or pending.
	Outcome SagaOutcome
	// Reply is the reply, when Outcome is replied.
	Reply SagaReply
	// Replayed: the reply was stored by an earlier delivery of the step.
	Replayed bool
}

// SagaSteps carries out the payment steps of order sagas: a charge, or the
// compensation that undoes it, each exactly once per (sagaId, stepName),
// however often it is delivered or re-sent, and in any order.
//
// A charge step is ChargePayment under the step's key (SagaStepScope),
// with the saga's client: the three layers, the outcome model, the
// completer and the provider's webhooks are the HTTP charge's, and its
// reply is stored and published by the same statements that record the
// outcome. A compensation is RefundPayment under its own key when the step
// charged, and an answer of its own otherwise. What is the saga's own is
// here: a step's identity and content (SagaStore.Begin), a re-sent step's
// reply published again with its eventId, the tombstone a compensation
// leaves before its step, and a compensation that waits for its step's
// unknown outcome (decision 0029).
type SagaSteps struct {
	db        Transactor
	client    domain.ClientID
	charges   *ChargePayment
	begin     *IdempotentCommand[ChargeCommand, chargeReservation] // a charge step's first try
	refunds   *RefundPayment
	voids     *PaymentTransition // nil: no two-step payments
	replies   SagaReplies
	orderWait time.Duration
	consumer  string
	logger    *slog.Logger
}

// NewSagaSteps builds the use case: the saga's payments belong to client;
// voids (NewVoidPayment; nil when the provider takes no two-step payments)
// release an authorized step's hold when it is compensated; a step whose
// order the projection does not hold yet is tried again for orderWait
// before it fails order-not-found; consumer names the commands' consumer
// in processed_event.
func NewSagaSteps(charges *ChargePayment, refunds *RefundPayment, voids *PaymentTransition, replies SagaReplies, client domain.ClientID,
	orderWait time.Duration, consumer string, logger *slog.Logger) *SagaSteps {
	return &SagaSteps{db: charges.db, client: client, charges: charges, refunds: refunds, voids: voids, replies: replies,
		begin:     NewIdempotentCommand(charges.run.core, CommandCharge, stepBeginning{charges.steps}),
		orderWait: orderWait, consumer: consumer, logger: logger}
}

// Charge carries out a charge step. firstTried is when the command was
// first tried, which bounds the wait for its order. Errors wrapping
// ErrSagaRetry ask for the command to be tried again later; any other
// error is unexpected, and the command is tried again too.
func (uc *SagaSteps) Charge(ctx context.Context, c SagaCharge, firstTried time.Time) (SagaResult, error) {
	cmd := ChargeCommand{Scope: SagaStepScope(uc.client, c.Step), Charge: c.Charge, Operation: OperationSagaCharge}
	// The usual step, tried for the first time, is begun with its claim:
	// its saga_step row, its payment and its key in one statement, which
	// commits all of them or nothing (stepBeginning). Its key is not read
	// before: a step whose row is new has a new key, and the statement
	// claims only under a new row. Every other step (its name taken:
	// re-sent, tombstoned, reused; its order not projected yet; its claim
	// refused) commits nothing there, and goes the long way below.
	if uc.charges.accepts(c.Charge) == nil {
		res, err := uc.begin.Handle(ctx, cmd)
		if !errors.Is(err, errStepNotBegun) {
			return uc.charged(ctx, c.Step, cmd, res, err, firstTried)
		}
	}

	stands, _, err := uc.db.AutoCommit().Sagas.Begin(ctx, SagaStepRecord{Step: c.Step, Kind: StepCharge, ContentHash: cmd.Hash()})
	switch {
	case err != nil:
		return SagaResult{}, err
	case stands.Kind == StepTombstone:
		// Its compensation came first: the step moves no money.
		return uc.republishOr(ctx, cmd.Scope, cancelledReply(c.Step))
	case stands.Kind != StepCharge || stands.ContentHash != cmd.Hash():
		return uc.reject(ctx, c.EventID, c.Step)
	}

	// The step's row names this charge. Its key may hold a record even
	// when Begin inserted the row: the purge may take the row before the
	// key (the row is written first, and a claim with a payment stays
	// until it is finished). The charge's claim reads the key first
	// (KeyReadingSteps) and answers from what it holds.
	res, err := uc.charges.Handle(ctx, cmd)
	return uc.charged(ctx, c.Step, cmd, res, err, firstTried)
}

// errStepNotBegun: a charge step's first try (stepBeginning) had another
// answer than the usual one, and committed nothing.
var errStepNotBegun = errors.New("the saga step was not begun with its claim")

// stepBeginning are the charge's steps for a charge step's first try: its
// claim begins the step too. They claim only a new step's key
// (NewKeySteps), and the rest is the charge's.
type stepBeginning struct{ *chargeSteps }

// ClaimsOnlyNewKeys: the claim is made only under a saga_step row its
// statement has just inserted.
func (stepBeginning) ClaimsOnlyNewKeys() {}

// Claim: the step's row, the payment and the key in one statement
// (ChargeStore.ClaimStep), which keeps only the usual answer: a new
// payment, or the takeover of a claim whose step's row the purge took
// first. Any other is errStepNotBegun, for the step to go the way every
// step took before (SagaSteps.Charge).
func (stepBeginning) Claim(ctx context.Context, r Repos, cmd ChargeCommand, k KeyClaim) (Claimed[chargeReservation], error) {
	step, _, err := stepOf(cmd.Scope)
	if err != nil {
		return Claimed[chargeReservation]{}, err
	}
	res, err := r.Charges.ClaimStep(ctx, k, cmd.Charge, step)
	switch {
	case errors.Is(err, ErrClaimNeedsTransaction):
		return Claimed[chargeReservation]{}, errStepNotBegun
	case err != nil:
		return Claimed[chargeReservation]{}, err
	case res.Reserved:
		return claimedPayment(ClaimFresh, *res.Payment, res.SagaID), nil
	case res.Claimed && res.Payment != nil && res.Payment.Status == domain.PaymentPending:
		return claimedPayment(ClaimResumed, *res.Payment, res.SagaID), nil
	default:
		return Claimed[chargeReservation]{}, fmt.Errorf("claim saga step %s: the statement kept an answer it must not: %+v", step.Name, res)
	}
}

// charged answers a charge step from what its charge did.
func (uc *SagaSteps) charged(ctx context.Context, step SagaStep, cmd ChargeCommand, res CommandResult, err error, firstTried time.Time) (SagaResult, error) {
	var inProgress *InProgressError
	var unknown *OutcomeUnknownError
	switch {
	case err == nil:
		return uc.answered(ctx, res)
	case errors.As(err, &unknown):
		return SagaResult{Outcome: SagaPending}, nil
	case errors.As(err, &inProgress):
		// Another attempt holds the step's key (it, or the completer,
		// replies), or another payment of the order is in flight (the
		// third layer: try again once it has settled).
		return uc.heldOrRetry(ctx, cmd.Scope, err)
	case errors.Is(err, domain.ErrOrderNotFound) && time.Since(firstTried) < uc.orderWait:
		return SagaResult{}, fmt.Errorf("%w: %w", ErrSagaRetry, err)
	case errors.Is(err, domain.ErrOrderNotFound):
		return uc.fail(ctx, step, cmd, SagaCodeOrderNotFound, fmt.Sprintf("the order is not known to the payment service after %s", uc.orderWait))
	case errors.Is(err, domain.ErrOrderMismatch):
		return uc.fail(ctx, step, cmd, SagaCodeOrderMismatch, "the customer, amount or currency differ from the order's")
	case errors.Is(err, ErrUnknownProvider):
		return uc.fail(ctx, step, cmd, SagaCodeUnknownProvider, "unknown payment provider")
	case errors.Is(err, ErrNoTwoStepPayments):
		return uc.fail(ctx, step, cmd, SagaCodeInvalidCommand, "the payment provider takes no two-step payments (captureMethod manual)")
	default:
		// The provider did not act for now (the key was given back), the
		// database is down, or something else: nothing is stored.
		return SagaResult{}, fmt.Errorf("%w: %w", ErrSagaRetry, err)
	}
}

// Compensate carries out a compensation: after a charged step, the charge
// refunded in full (what the step charged less what was refunded before),
// once; after an authorized step, its hold voided while it is uncaptured,
// or what a capture took refunded, as a charge's; after a step that
// charged nothing (or whose hold was voided or lapsed), compensated with
// zero; while the step's outcome is unknown, waiting (the completer's run
// takes it up again); before the step, a tombstone, so that the step
// moves no money when it comes.
func (uc *SagaSteps) Compensate(ctx context.Context, c SagaCompensation) (SagaResult, error) {
	if err := validStepName("compensates", c.Compensates); err != nil {
		return SagaResult{}, err
	}
	pool := uc.db.AutoCommit()
	scope := SagaCompensationScope(uc.client, c.Step, c.Compensates)
	self, _, err := pool.Sagas.Begin(ctx, SagaStepRecord{Step: c.Step, Kind: StepCompensation,
		ContentHash: compensationHash(c.Compensates), Compensates: c.Compensates})
	switch {
	case err != nil:
		return SagaResult{}, err
	case self.Kind != StepCompensation || self.ContentHash != compensationHash(c.Compensates):
		return uc.reject(ctx, c.EventID, c.Step)
	}
	// A compensation that ran before: its answer, or its refund in flight.
	// A key claimed with no refund fixed is a void in flight: the way
	// below leads to it again, while the payment stays AUTHORIZED.
	rec, found, err := pool.Keys.Lookup(ctx, scope)
	switch {
	case err != nil:
		return SagaResult{}, err
	case found && rec.Status == RecordCompleted:
		return uc.republish(ctx, rec.Response)
	case self.RefundAmount != nil:
		return uc.refund(ctx, c, scope, self)
	}

	step := SagaStep{SagaID: c.Step.SagaID, Name: c.Compensates}
	charged, found, err := pool.Sagas.Get(ctx, step)
	switch {
	case err != nil:
		return SagaResult{}, err
	case !found:
		return uc.tombstone(ctx, c, scope, step)
	case charged.Kind != StepCharge:
		// A tombstone of another compensation, or a compensation's name:
		// nothing was charged under it.
		return uc.answer(ctx, scope, compensationHash(c.Compensates), compensatedWith(c.Step, c.Compensates))
	}
	stepRec, found, err := pool.Keys.Lookup(ctx, SagaStepScope(uc.client, step))
	switch {
	case err != nil:
		return SagaResult{}, err
	case !found || stepRec.Status != RecordCompleted:
		// The step's outcome is not known yet, or the step has not been
		// carried out (it is being tried again): wait for it.
		if err := pool.Sagas.SetWaiting(ctx, c.Step, true); err != nil {
			return SagaResult{}, err
		}
		return SagaResult{Outcome: SagaPending}, nil
	}
	reply, _, err := uc.replies.DecodeSagaReply(stepRec.Response)
	if err != nil {
		return SagaResult{}, fmt.Errorf("read the reply of step %s: %w", step.Name, err)
	}
	switch reply.Type {
	case ReplyCharged:
	case ReplyAuthorized:
		p, err := pool.Charges.Get(ctx, reply.PaymentID)
		if err != nil {
			return SagaResult{}, err
		}
		switch p.Status {
		case domain.PaymentAuthorized:
			// Held, not taken: release the hold.
			return uc.void(ctx, c, scope, self, p.ID)
		case domain.PaymentSucceeded:
			// Captured meanwhile (by the orchestrator, over HTTP): what the
			// capture took is refunded, as a charge is.
		case domain.PaymentVoided, domain.PaymentExpired:
			// Released already, by a void or by its lapse: nothing taken.
			return uc.answer(ctx, scope, compensationHash(c.Compensates),
				releasedReply(c.Step, c.Compensates, p.ID, p.Status == domain.PaymentVoided))
		default:
			return SagaResult{}, fmt.Errorf("%w: the payment %d of step %s is %s", ErrSagaRetry, p.ID, step.Name, p.Status)
		}
	default:
		// Declined, failed, or cancelled: nothing was charged by the step.
		return uc.answer(ctx, scope, compensationHash(c.Compensates), compensatedWith(c.Step, c.Compensates))
	}
	amount, err := uc.leftToRefund(ctx, reply.PaymentID, compensationRefundID(c.Step))
	if err != nil {
		return SagaResult{}, err
	}
	if amount.IsZero() {
		return uc.answer(ctx, scope, compensationHash(c.Compensates), compensatedWith(c.Step, c.Compensates))
	}
	// Fixed once: a re-sent compensation asks for the very same refund.
	self, err = pool.Sagas.FixRefund(ctx, c.Step, reply.PaymentID, amount)
	if err != nil {
		return SagaResult{}, err
	}
	return uc.refund(ctx, c, scope, self)
}

// refund carries out a compensation's refund, as fixed in its row. Once
// the refund's key is claimed, the compensation waits for its step no
// more: the refund's outcome is the refund command's, replied by whoever
// records it (this attempt, a retry, the completer, the provider's event).
func (uc *SagaSteps) refund(ctx context.Context, c SagaCompensation, scope IdempotencyScope, self SagaStepRecord) (SagaResult, error) {
	if self.PaymentID == nil || self.RefundAmount == nil {
		return SagaResult{}, fmt.Errorf("compensation %s has a record but no refund fixed", c.Step.Name)
	}
	res, err := uc.refunds.Handle(ctx, RefundCommand{Scope: scope, PaymentID: *self.PaymentID, Amount: *self.RefundAmount,
		ExternalRefundID: compensationRefundID(c.Step), Operation: OperationSagaCompensation})
	return uc.compensationRan(ctx, c, scope, self, res, err)
}

// compensationRan answers a compensation from what its command (a refund,
// or a void) did. Once the command's key is claimed, the compensation waits
// for its step no more. Anything that stored nothing (the payment moved on
// since it was read, the provider down, the database) is tried again.
func (uc *SagaSteps) compensationRan(ctx context.Context, c SagaCompensation, scope IdempotencyScope, self SagaStepRecord, res CommandResult, err error) (SagaResult, error) {
	var inProgress *InProgressError
	var unknown *OutcomeUnknownError
	claimed := err == nil || errors.As(err, &unknown) || errors.As(err, &inProgress)
	if claimed && self.Waiting {
		if err := uc.db.AutoCommit().Sagas.SetWaiting(ctx, c.Step, false); err != nil {
			return SagaResult{}, err
		}
	}
	switch {
	case err == nil:
		return uc.answered(ctx, res)
	case unknown != nil:
		return SagaResult{Outcome: SagaPending}, nil
	case inProgress != nil, errors.Is(err, ErrTransitionInProgress):
		return uc.heldOrRetry(ctx, scope, err)
	default:
		return SagaResult{}, fmt.Errorf("%w: %w", ErrSagaRetry, err)
	}
}

// void releases an authorized step's hold under the compensation's own
// key: the void command of the HTTP API (PaymentTransition), whose record
// stores the compensation's reply and publishes it in the statement that
// records the void. A lost answer leaves it pending: whoever settles the
// void (a retry, the completer, the provider's event) replies. A capture
// or void of the payment in flight, or a payment that moved on since it
// was read, is tried again: the next try reads where the payment stands.
func (uc *SagaSteps) void(ctx context.Context, c SagaCompensation, scope IdempotencyScope, self SagaStepRecord, payment domain.PaymentID) (SagaResult, error) {
	if uc.voids == nil {
		return SagaResult{}, fmt.Errorf("%w: step %s is authorized and no void is configured", ErrSagaRetry, c.Compensates)
	}
	res, err := uc.voids.Handle(ctx, TransitionCommand{Scope: scope, PaymentID: payment, Operation: OperationSagaCompensation})
	return uc.compensationRan(ctx, c, scope, self, res, err)
}

// leftToRefund is what the payment took (charged, or captured) less what
// its other refunds (made, or in flight) give back.
func (uc *SagaSteps) leftToRefund(ctx context.Context, payment domain.PaymentID, own domain.ExternalRefundID) (decimal.Decimal, error) {
	pool := uc.db.AutoCommit()
	p, err := pool.Charges.Get(ctx, payment)
	if err != nil {
		return decimal.Decimal{}, err
	}
	refunds, err := pool.Refunds.List(ctx, payment)
	if err != nil {
		return decimal.Decimal{}, err
	}
	left := p.CapturedAmount().Amount()
	for _, r := range refunds {
		if r.ExternalRefundID != own && (r.Status == domain.RefundSucceeded || r.Status == domain.RefundPending) {
			left = left.Sub(r.Amount.Amount())
		}
	}
	return decimal.Max(left, decimal.Zero), nil
}

// tombstone answers a compensation whose step has not come: the step's
// name is taken by a tombstone, with the cancelled reply the step will
// get, and the compensation's own answer (zero) is stored and published,
// in one transaction. If the step came meanwhile, nothing of it stays and
// the compensation is tried again.
func (uc *SagaSteps) tombstone(ctx context.Context, c SagaCompensation, scope IdempotencyScope, step SagaStep) (SagaResult, error) {
	var result SagaResult
	err := uc.db.Transact(ctx, func(ctx context.Context, r Repos) error {
		stands, inserted, err := r.Sagas.Begin(ctx, SagaStepRecord{Step: step, Kind: StepTombstone, ContentHash: tombstoneHash})
		if err != nil {
			return err
		}
		if !inserted {
			return fmt.Errorf("%w: step %s came while its compensation ran (%s)", ErrSagaRetry, step.Name, stands.Kind)
		}
		cancelled := cancelledReply(step)
		cancelled.CompensatedBy = c.Step.Name
		stored, err := uc.replies.EncodeSagaReply(cancelled)
		if err != nil {
			return err
		}
		// Stored for the step, published when it comes.
		stored.Publish = nil
		if _, err := r.Keys.Answer(ctx, SagaStepScope(uc.client, step), CommandCharge, tombstoneHash, stored); err != nil {
			return err
		}
		result, err = uc.answerIn(ctx, r, scope, compensationHash(c.Compensates), compensatedWith(c.Step, c.Compensates))
		return err
	})
	return result, err
}

// cancelledReply is the reply of a step that came after its compensation.
func cancelledReply(step SagaStep) SagaReply {
	return newSagaReply(ReplyCancelled, step)
}

// fail stores a charge step's failure that needs no provider call under
// the step's key, with the charge's hash so that a re-sent step replays
// it, and publishes it.
func (uc *SagaSteps) fail(ctx context.Context, step SagaStep, cmd ChargeCommand, code, detail string) (SagaResult, error) {
	return uc.answer(ctx, cmd.Scope, cmd.Hash(), failedReply(step, code, detail))
}

// answer stores reply as the answer of scope, which holds no record, and
// publishes it; if the key holds one by now, that one is the answer.
func (uc *SagaSteps) answer(ctx context.Context, scope IdempotencyScope, hash string, reply SagaReply) (SagaResult, error) {
	var result SagaResult
	err := uc.db.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		result, err = uc.answerIn(ctx, r, scope, hash, reply)
		return err
	})
	return result, err
}

func (uc *SagaSteps) answerIn(ctx context.Context, r Repos, scope IdempotencyScope, hash string, reply SagaReply) (SagaResult, error) {
	stored, err := uc.replies.EncodeSagaReply(reply)
	if err != nil {
		return SagaResult{}, err
	}
	inserted, err := r.Keys.Answer(ctx, scope, CommandCharge, hash, stored)
	if err != nil {
		return SagaResult{}, err
	}
	if !inserted {
		return SagaResult{}, fmt.Errorf("%w: the key of step %s was answered meanwhile", ErrSagaRetry, reply.Step.Name)
	}
	return SagaResult{Outcome: SagaReplied, Reply: reply}, nil
}

// answered turns the core's answer into the step's: a new outcome's reply
// was published by the statement that stored it; a replayed one is
// published again, with its eventId.
func (uc *SagaSteps) answered(ctx context.Context, res CommandResult) (SagaResult, error) {
	if res.Replayed {
		return uc.republish(ctx, res.Response)
	}
	reply, _, err := uc.replies.DecodeSagaReply(res.Response)
	return SagaResult{Outcome: SagaReplied, Reply: reply}, err
}

// republish publishes a stored reply again, with its eventId.
func (uc *SagaSteps) republish(ctx context.Context, stored StoredResponse) (SagaResult, error) {
	reply, withPublication, err := uc.replies.DecodeSagaReply(stored)
	if err != nil {
		return SagaResult{}, err
	}
	if err := uc.db.AutoCommit().Outbox.Republish(ctx, withPublication); err != nil {
		return SagaResult{}, err
	}
	return SagaResult{Outcome: SagaReplied, Reply: reply, Replayed: true}, nil
}

// republishOr publishes the reply stored for scope again, or, if the purge
// took it, stores and publishes fresh.
func (uc *SagaSteps) republishOr(ctx context.Context, scope IdempotencyScope, fresh SagaReply) (SagaResult, error) {
	rec, found, err := uc.db.AutoCommit().Keys.Lookup(ctx, scope)
	switch {
	case err != nil:
		return SagaResult{}, err
	case found && rec.Status == RecordCompleted:
		return uc.republish(ctx, rec.Response)
	}
	return uc.answer(ctx, scope, tombstoneHash, fresh)
}

// heldOrRetry answers a step whose key another attempt holds (it, or the
// completer, replies: pending), and asks for another try when the key is
// free (another payment of the order was in flight).
func (uc *SagaSteps) heldOrRetry(ctx context.Context, scope IdempotencyScope, cause error) (SagaResult, error) {
	rec, found, err := uc.db.AutoCommit().Keys.Lookup(ctx, scope)
	switch {
	case err != nil:
		return SagaResult{}, err
	case found && rec.Status == RecordCompleted:
		return uc.republish(ctx, rec.Response)
	case found:
		return SagaResult{Outcome: SagaPending}, nil
	}
	return SagaResult{}, fmt.Errorf("%w: %w", ErrSagaRetry, cause)
}

// reject answers a command whose (sagaId, stepName) names another command:
// it moves nothing, and its reply is published once per command (its
// eventId recorded in processed_event with it).
func (uc *SagaSteps) reject(ctx context.Context, eventID uuid.UUID, step SagaStep) (SagaResult, error) {
	return uc.publishOnce(ctx, eventID, rejectedReply(step))
}

func rejectedReply(step SagaStep) SagaReply {
	r := newSagaReply(ReplyRejected, step)
	r.Code, r.Detail = SagaCodeStepReused, "this (sagaId, stepName) names another command; nothing was done"
	return r
}

// Invalid answers a command that cannot be carried out (it does not parse
// whole, or a field is invalid), whose step can still be named: a failed
// reply, once per command.
func (uc *SagaSteps) Invalid(ctx context.Context, eventID uuid.UUID, step SagaStep, detail string) (SagaResult, error) {
	return uc.publishOnce(ctx, eventID, failedReply(step, SagaCodeInvalidCommand, detail))
}

// publishOnce publishes reply unless the command eventID was answered
// before: processed_event records it in the same transaction.
func (uc *SagaSteps) publishOnce(ctx context.Context, eventID uuid.UUID, reply SagaReply) (SagaResult, error) {
	stored, err := uc.replies.EncodeSagaReply(reply)
	if err != nil {
		return SagaResult{}, err
	}
	result := SagaResult{Outcome: SagaReplied, Reply: reply}
	err = uc.db.Transact(ctx, func(ctx context.Context, r Repos) error {
		if eventID != uuid.Nil {
			fresh, err := r.ProcessedEvents.MarkProcessed(ctx, uc.consumer, []uuid.UUID{eventID})
			if err != nil {
				return err
			}
			if !fresh[eventID] {
				result.Replayed = true
				return nil
			}
		}
		return r.Outbox.Republish(ctx, stored)
	})
	return result, err
}

// CompleteWaitingCompensations takes up, on the completer's schedule, the
// compensations that wait for their step's outcome: each whose step has
// settled is carried out now.
func (uc *SagaSteps) CompleteWaitingCompensations(ctx context.Context, limit int) (done, waiting int, err error) {
	recs, err := uc.db.AutoCommit().Sagas.Waiting(ctx, limit)
	if err != nil {
		return 0, 0, err
	}
	pool := uc.db.AutoCommit()
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return done, waiting, err
		}
		c := SagaCompensation{Step: rec.Step, Compensates: rec.Compensates}
		if _, claimed, err := pool.Keys.Lookup(ctx, SagaCompensationScope(uc.client, c.Step, c.Compensates)); err == nil && claimed {
			// Its refund is claimed: whoever records it replies. The
			// compensation waits for its step no more.
			done++
			if err := pool.Sagas.SetWaiting(ctx, rec.Step, false); err != nil {
				return done, waiting, err
			}
			continue
		}
		res, err := uc.Compensate(ctx, c)
		switch {
		case err != nil:
			waiting++
			uc.logger.WarnContext(ctx, "a waiting compensation could not be carried out; trying again next run",
				"saga_id", rec.Step.SagaID, "step", rec.Step.Name, "err", err)
		case res.Outcome == SagaPending:
			waiting++
		default:
			done++
			if err := uc.db.AutoCommit().Sagas.SetWaiting(ctx, rec.Step, false); err != nil {
				return done, waiting, err
			}
		}
	}
	return done, waiting, nil
}

// Unresolved counts the saga's steps left without a reply for longer than
// olderThan, for the alert on steps left unresolved.
func (uc *SagaSteps) Unresolved(ctx context.Context, olderThan time.Duration) (int, error) {
	return uc.db.AutoCommit().Sagas.Unresolved(ctx, uc.client, olderThan)
}
