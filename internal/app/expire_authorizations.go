package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// EventPaymentExpired announces a two-step payment whose hold lapsed at
// the provider: nothing was taken, and the order is free.
const EventPaymentExpired = "PaymentExpired.v1"

// ExpireLapsedAuthorizations settles the authorizations whose hold the
// provider let lapse (its own time decides, such as Stripe's seven days):
// for each AUTHORIZED payment unchanged for a while, it asks the provider
// where the hold stands, and records EXPIRED only when the provider says
// so, never from the local clock alone. A payment with a capture or a
// void in flight is left to that command: its answer says more.
type ExpireLapsedAuthorizations struct {
	db          Transactor
	authorizers map[domain.ProviderName]AuthorizationProvider
	olderThan   time.Duration
	limit       int
	logger      *slog.Logger
}

// NewExpireLapsedAuthorizations builds the job's use case: it asks about
// payments AUTHORIZED for longer than olderThan, at most limit per run.
func NewExpireLapsedAuthorizations(charges *ChargePayment, olderThan time.Duration, limit int, logger *slog.Logger) *ExpireLapsedAuthorizations {
	return &ExpireLapsedAuthorizations{db: charges.db, authorizers: charges.authorizers, olderThan: olderThan, limit: limit, logger: logger}
}

// ExpireResult counts what one run did.
type ExpireResult struct {
	// Expired: the provider said the hold lapsed; the payment is EXPIRED.
	Expired int
	// Held: the provider still holds the money.
	Held int
	// Unknown: the provider could not be asked, or said something the
	// service's record does not explain (captured or voided while the
	// payment is AUTHORIZED: a capture's or void's own answer settles it);
	// asked again next run.
	Unknown int
}

// Handle asks about one page of authorized payments.
func (uc *ExpireLapsedAuthorizations) Handle(ctx context.Context) (ExpireResult, error) {
	var res ExpireResult
	pool := uc.db.AutoCommit()
	payments, err := pool.Transitions.ListAuthorized(ctx, uc.olderThan, uc.limit)
	if err != nil {
		return res, err
	}
	for _, p := range payments {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		log := uc.logger.With("payment_id", p.ID)
		authorizer, ok := uc.authorizers[p.Charge.Provider]
		if !ok {
			res.Unknown++
			log.ErrorContext(ctx, "an authorized payment of a provider that takes no two-step payments")
			continue
		}
		hold, err := authorizer.Hold(ctx, providerChargeOf(p))
		switch {
		case err != nil:
			res.Unknown++
			log.WarnContext(ctx, "asking the provider about an authorization's hold failed; asking again next run", "err", err)
		case hold == HoldActive:
			res.Held++
		case hold == HoldExpired:
			expired, err := uc.expire(ctx, p)
			switch {
			case err != nil:
				return res, err
			case expired:
				res.Expired++
			default:
				res.Unknown++ // a capture or void got there first
			}
		default:
			res.Unknown++
			log.WarnContext(ctx, "the provider reports an authorization's hold moved on while the payment is AUTHORIZED; the capture's or void's own answer settles it", "hold", hold)
		}
	}
	return res, nil
}

// expire records p EXPIRED with its event, if it is still AUTHORIZED with
// nothing in flight.
func (uc *ExpireLapsedAuthorizations) expire(ctx context.Context, p domain.Payment) (bool, error) {
	p.Status = domain.PaymentExpired
	ev, err := NewPaymentEvent(p, uuid.NullUUID{}, time.Now())
	if err != nil {
		return false, err
	}
	expired, err := uc.db.AutoCommit().Transitions.Expire(ctx, ev)
	if err != nil && !errors.Is(err, ErrStoreUnavailable) {
		return false, err
	}
	return expired, err
}
