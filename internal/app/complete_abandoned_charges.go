package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/example/payment-service/internal/domain"
)

// OperationChargePayment is the Operation of a ChargeCommand made through
// POST /payments. It is part of the command hash, so the completer must use
// the very string the HTTP adapter uses.
const OperationChargePayment = "POST /payments"

// CommandName names the command an idempotency record belongs to, in its
// command column (migration 00013).
type CommandName string

// CommandCharge is the name of a ChargeCommand's records. claimAndReserveSQL
// writes it, and the TTL purge reads it, as the literal 'charge'
// (internal/repository).
const CommandCharge CommandName = "charge"

// AbandonedCharges finds idempotency records whose request went away
// between claiming the key and recording the outcome. Both methods act only
// on records of the commands they are given: what a record's payment_id
// means (and so whether its command reserved anything) is the command's own
// affair, and a record of a command the caller does not know is never
// listed or released.
type AbandonedCharges interface {
	// ListAbandoned returns up to limit IN_PROGRESS records, each of one of
	// commands, whose lock expired more than expiredFor ago, the
	// longest-expired first.
	ListAbandoned(ctx context.Context, commands []CommandName, expiredFor time.Duration, limit int) ([]IdempotencyRecord, error)
	// ReleaseAbandoned deletes the record if it is still IN_PROGRESS, of one
	// of commands, with an expired lock and no reserved payment. It returns
	// false if the record changed meanwhile (a retry took it over), and then
	// deletes nothing.
	ReleaseAbandoned(ctx context.Context, commands []CommandName, scope IdempotencyScope) (bool, error)
}

// CompleteAbandonedCharges drives charges whose client never came back to a
// final outcome, the way Stripe-style designs re-drive unfinished work: no
// payment stays PENDING (unknown to the customer and to the books) just
// because the process that claimed it died.
//
// Phase 1 of ChargePayment claims the key and reserves the PENDING payment in
// one transaction and links them (the recovery point). The command can
// therefore be rebuilt from the payment row, and its hash is the stored one,
// because the hash is over canonical values. ChargePayment then takes the
// expired claim over exactly as a client's retry would, and calls the
// provider with the payment's own provider idempotency key, so a charge that
// did reach the provider is not made twice.
//
// It knows one command, the charge: it lists and releases only records of
// CommandCharge. A record of any other command is left alone whatever its
// state. Its payment_id NULL does not mean "nothing reserved" (another
// command keeps its recovery point elsewhere), so releasing it could drop
// the only trace of a provider call that moved money, and every retry of
// its key would then meet a fresh claim instead of the recovery point.
type CompleteAbandonedCharges struct {
	tx        Transactor
	abandoned AbandonedCharges
	charge    *ChargePayment
	grace     time.Duration
	limit     int
	logger    *slog.Logger
}

// completerCommands are the commands whose records the completer may list
// and release: those it can resume, today the charge alone (it rebuilds a
// ChargeCommand from the record's payment).
var completerCommands = []CommandName{CommandCharge}

// NewCompleteAbandonedCharges builds the use case. A record is taken only
// once its lock has been expired for grace: a client that retries soon
// after its lock expired finishes its own charge and sees it fresh, not as
// a replay. One run handles at most limit records, so a run stays short and
// whatever is left waits for the next.
func NewCompleteAbandonedCharges(tx Transactor, abandoned AbandonedCharges, charge *ChargePayment, grace time.Duration, limit int, logger *slog.Logger) *CompleteAbandonedCharges {
	return &CompleteAbandonedCharges{tx: tx, abandoned: abandoned, charge: charge, grace: grace, limit: limit, logger: logger}
}

// CompleteResult counts what one run did with the abandoned records.
type CompleteResult struct {
	// Completed: the record now holds a final outcome.
	Completed int
	// Released: the key was given back: no payment was reserved, so
	// nothing can have been charged.
	Released int
	// Busy: someone else (the client's retry) holds the key right now.
	Busy int
	// Unknown: the provider was asked again and its answer was lost again
	// (or it said "not charged" for this call only). The payment stays
	// PENDING and the next run asks again.
	Unknown int
	// Failed: left as it was for the next run; each is logged.
	Failed int
}

// Handle handles one page of abandoned records. It stops between records
// when ctx ends.
func (uc *CompleteAbandonedCharges) Handle(ctx context.Context) (CompleteResult, error) {
	var res CompleteResult
	records, err := uc.abandoned.ListAbandoned(ctx, completerCommands, uc.grace, uc.limit)
	if err != nil {
		return res, err
	}
	for _, rec := range records {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		uc.complete(ctx, rec, &res)
	}
	return res, nil
}

func (uc *CompleteAbandonedCharges) complete(ctx context.Context, rec IdempotencyRecord, res *CompleteResult) {
	log := uc.logger.With("client_id", rec.Scope.ClientID, "idempotency_key", rec.Scope.Key)
	if rec.PaymentID == nil {
		// Nothing was reserved, so nothing can have been charged: give the
		// key back so the client's retry runs the command afresh.
		released, err := uc.abandoned.ReleaseAbandoned(ctx, completerCommands, rec.Scope)
		switch {
		case err != nil:
			res.Failed++
			log.ErrorContext(ctx, "releasing an abandoned key failed", "err", err)
		case released:
			res.Released++
		default:
			res.Busy++
		}
		return
	}
	var payment domain.Payment
	err := uc.tx.Transact(ctx, func(ctx context.Context, r Repos) (err error) {
		payment, err = r.Payments.Get(ctx, *rec.PaymentID)
		return err
	})
	if err != nil {
		res.Failed++
		log.ErrorContext(ctx, "reading an abandoned charge's payment failed", "payment_id", *rec.PaymentID, "err", err)
		return
	}
	cmd := ChargeCommand{Scope: rec.Scope, Charge: payment.Charge, Operation: OperationChargePayment}
	if cmd.Hash() != rec.CommandHash {
		// Not a command this completer knows how to rebuild. Leave it alone
		// rather than guess: its lock has expired, so the client's own
		// retry still finishes it.
		res.Failed++
		log.ErrorContext(ctx, "abandoned record does not match its payment's charge; left for the client's retry", "payment_id", payment.ID)
		return
	}
	_, err = uc.charge.Handle(ctx, cmd)
	var inProgress *InProgressError
	var unknown *OutcomeUnknownError
	switch {
	case err == nil:
		res.Completed++
		log.InfoContext(ctx, "completed an abandoned charge", "payment_id", payment.ID)
	case errors.As(err, &inProgress):
		res.Busy++
	case errors.As(err, &unknown):
		// Never released: an earlier attempt may have charged. The next run
		// asks the provider again with the same provider key.
		res.Unknown++
		log.WarnContext(ctx, "abandoned charge: the provider's outcome is still unknown; asking again next run", "payment_id", payment.ID, "err", err)
	default:
		res.Failed++
		log.ErrorContext(ctx, "completing an abandoned charge failed", "payment_id", payment.ID, "err", err)
	}
}
