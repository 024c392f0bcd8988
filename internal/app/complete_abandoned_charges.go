package app

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"
)

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

// CompleteAbandonedCharges drives commands whose client never came back to
// a final outcome, the way Stripe-style designs re-drive unfinished work: no
// reservation stays PENDING (unknown to the customer and to the books) just
// because the process that claimed it died.
//
// Phase 1 of every command on the core claims the key and makes its
// reservation in one statement and links them (the recovery point). The
// command can therefore be rebuilt from the reservation, and its hash is
// the stored one, because the hash is over canonical values. The command
// then takes the expired claim over exactly as a client's retry would, and
// calls the provider with the reservation's own provider idempotency key,
// so a call that did reach the provider is not made twice.
//
// It knows the commands it is given (Resumable, by CommandName), and lists
// and releases only their records. A record of any other command is left
// alone whatever its state: what its recovery point is, and so whether its
// command reserved anything, is that command's own affair, and releasing it
// could drop the only trace of a provider call that moved money.
type CompleteAbandonedCharges struct {
	abandoned AbandonedCharges
	commands  map[CommandName]Resumable
	names     []CommandName
	grace     time.Duration
	limit     int
	logger    *slog.Logger
}

// Resumable is a command the completer can drive to its end.
type Resumable interface {
	// Resume runs the command of an abandoned record again, rebuilt from the
	// record's recovery point, as its client's retry would, and returns
	// what Handle returns. ErrNothingReserved: the record has no recovery
	// point, so nothing can have reached the provider, and the completer
	// gives the key back.
	Resume(ctx context.Context, rec IdempotencyRecord) error
}

// ErrNothingReserved: an abandoned record has no recovery point.
var ErrNothingReserved = errors.New("the abandoned record has no reservation")

// NewCompleteAbandonedCharges builds the use case over commands, the
// commands it may resume by name. A record is taken only once its lock has
// been expired for grace: a client that retries soon after its lock expired
// finishes its own command and sees it fresh, not as a replay. One run
// handles at most limit records, so a run stays short and whatever is left
// waits for the next.
func NewCompleteAbandonedCharges(abandoned AbandonedCharges, commands map[CommandName]Resumable, grace time.Duration, limit int, logger *slog.Logger) *CompleteAbandonedCharges {
	names := slices.Sorted(maps.Keys(commands))
	return &CompleteAbandonedCharges{abandoned: abandoned, commands: commands, names: names, grace: grace, limit: limit, logger: logger}
}

// CompleteResult counts what one run did with the abandoned records.
type CompleteResult struct {
	// Completed: the record now holds a final outcome.
	Completed int
	// Released: the key was given back: nothing was reserved, so nothing
	// can have reached the provider.
	Released int
	// Busy: someone else (the client's retry) holds the key right now.
	Busy int
	// Unknown: the provider was asked again and its answer was lost again
	// (or it refused for now a call an earlier attempt had made). The
	// reservation stays PENDING and the next run asks again.
	Unknown int
	// Failed: left as it was for the next run; each is logged.
	Failed int
}

// Handle handles one page of abandoned records. It stops between records
// when ctx ends.
func (uc *CompleteAbandonedCharges) Handle(ctx context.Context) (CompleteResult, error) {
	var res CompleteResult
	records, err := uc.abandoned.ListAbandoned(ctx, uc.names, uc.grace, uc.limit)
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
	log := uc.logger.With("command", rec.Command, "client_id", rec.Scope.ClientID, "idempotency_key", rec.Scope.Key)
	command, ok := uc.commands[rec.Command]
	if !ok { // listed only by name, so only a repository bug gets here
		res.Failed++
		log.ErrorContext(ctx, "abandoned record of a command the completer does not know; left alone")
		return
	}
	err := command.Resume(ctx, rec)
	var inProgress *InProgressError
	var unknown *OutcomeUnknownError
	switch {
	case errors.Is(err, ErrNothingReserved):
		// Give the key back so the client's retry runs the command afresh.
		released, err := uc.abandoned.ReleaseAbandoned(ctx, []CommandName{rec.Command}, rec.Scope)
		switch {
		case err != nil:
			res.Failed++
			log.ErrorContext(ctx, "releasing an abandoned key failed", "err", err)
		case released:
			res.Released++
		default:
			res.Busy++
		}
	case err == nil:
		res.Completed++
		log.InfoContext(ctx, "completed an abandoned command")
	case errors.As(err, &inProgress):
		res.Busy++
	case errors.As(err, &unknown):
		// Never released: an earlier attempt may have reached the provider.
		// The next run asks it again with the same provider key.
		res.Unknown++
		log.WarnContext(ctx, "abandoned command: the provider's outcome is still unknown; asking again next run", "err", err)
	default:
		res.Failed++
		log.ErrorContext(ctx, "completing an abandoned command failed", "err", err)
	}
}
