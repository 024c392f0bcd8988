package stripe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
)

// errNotFound: no PaymentIntent carries the key, as far as the listing
// and the search see.
var errNotFound = errors.New("no PaymentIntent carries the key")

// pageSize is how many objects one page of a listing asks for, Stripe's
// most.
const pageSize = 100

// LookupCharge implements app.ChargeProvider: the List API's
// PaymentIntents created since the payment was reserved (less the clock
// margin), strongly consistent, read page by page for the one whose
// metadata carries the key. Nothing found is ErrNoProviderCharge, which
// proves nothing at Stripe (it acts on a request however late it
// arrives): the outcome model keeps the payment unknown on it. The Search
// API is never asked here: it may not have seen a PaymentIntent made a
// minute ago.
func (c *Client) LookupCharge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return c.lookup(ctx, req, false)
}

// LookupAuthorization implements app.AuthorizationProvider, as
// LookupCharge does for a charge.
func (c *Client) LookupAuthorization(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return c.lookup(ctx, req, true)
}

func (c *Client) lookup(ctx context.Context, req app.ProviderCharge, manual bool) (app.ProviderDecision, error) {
	if req.ReservedAt.IsZero() {
		return "", fmt.Errorf("%w: the lookup has no reservation time to list from", app.ErrProviderOutcomeUnknown)
	}
	found, err := c.list(ctx, req.IdempotencyKey, req.ReservedAt.Add(-c.cfg.LookupSkew), time.Time{})
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: lookup: %w", app.ErrProviderOutcomeUnknown, err)
	case len(found) == 0:
		return "", fmt.Errorf("%w: no PaymentIntent created since %s carries the key (at Stripe, not a proof that none will)",
			app.ErrNoProviderCharge, req.ReservedAt.Add(-c.cfg.LookupSkew).UTC().Format(time.RFC3339))
	case len(found) > 1:
		return "", fmt.Errorf("%w: %d PaymentIntents carry the key (%s, %s, ...)", app.ErrProviderOutcomeUnknown, len(found), found[0].ID, found[1].ID)
	}
	amount, currency, err := minorUnits(req.Charge.Amount)
	if err != nil {
		return "", fmt.Errorf("%w: %w", app.ErrProviderOutcomeUnknown, err)
	}
	if err := describes(found[0], req.IdempotencyKey, amount, currency); err != nil {
		return "", err
	}
	return decisionOf(found[0], manual)
}

// list reads the PaymentIntents created from from to to (zero: now), for
// those whose metadata carries key, newest first; at most
// MaxLookupPages pages, past which it cannot say.
func (c *Client) list(ctx context.Context, key string, from, to time.Time) ([]*stripego.PaymentIntent, error) {
	created := &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix()}
	if !to.IsZero() {
		created.LesserThanOrEqual = to.Unix()
	}
	params := &stripego.PaymentIntentListParams{ListParams: stripego.ListParams{Limit: stripego.Int64(pageSize)}, CreatedRange: created}
	var found []*stripego.PaymentIntent
	seen := 0
	for pi, err := range c.api.V1PaymentIntents.List(ctx, params) {
		if err != nil {
			return nil, err
		}
		if seen++; seen > c.cfg.MaxLookupPages*pageSize {
			return nil, fmt.Errorf("more than %d PaymentIntents were created since %s: too many to read", c.cfg.MaxLookupPages*pageSize, from.UTC().Format(time.RFC3339))
		}
		if pi.Metadata[metaProviderKey] == key {
			found = append(found, pi)
		}
	}
	return found, nil
}

// locate finds the PaymentIntent made for key, whose payment was reserved
// at reservedAt, for a capture, a void, a refund or a hold to name by its
// id, which the service does not store. It lists around the reservation
// first (strongly consistent: the first attempt's request lands within
// NearWindow of it), then asks the Search API, whose hits it reads again
// by id (strongly consistent) and whose misses prove nothing:
// errNotFound then means "not found now", never "none exists".
func (c *Client) locate(ctx context.Context, key string, reservedAt time.Time) (*stripego.PaymentIntent, error) {
	if !reservedAt.IsZero() {
		found, err := c.list(ctx, key, reservedAt.Add(-c.cfg.LookupSkew), reservedAt.Add(c.cfg.NearWindow))
		switch {
		case err != nil:
			return nil, err
		case len(found) == 1:
			return found[0], nil
		case len(found) > 1:
			return nil, fmt.Errorf("%d PaymentIntents carry the key (%s, %s, ...)", len(found), found[0].ID, found[1].ID)
		}
	}
	params := &stripego.PaymentIntentSearchParams{SearchParams: stripego.SearchParams{
		Query: "metadata['" + metaProviderKey + "']:'" + searchEscape(key) + "'", Limit: stripego.Int64(10)}}
	for hit, err := range c.api.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return nil, err
		}
		pi, err := c.api.V1PaymentIntents.Retrieve(ctx, hit.ID, &stripego.PaymentIntentRetrieveParams{})
		if err != nil {
			return nil, err
		}
		if pi.Metadata[metaProviderKey] == key {
			return pi, nil
		}
	}
	return nil, errNotFound
}

// searchEscape writes s inside a quoted string of Stripe's search query
// language.
func searchEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// Hold implements app.AuthorizationProvider: where the authorization's
// PaymentIntent stands now (located as a capture locates it).
// requires_capture holds the money; succeeded was captured; canceled with
// the reason automatic lapsed (Stripe cancels an uncaptured PaymentIntent
// when its capture window ends), with another reason was voided. A
// PaymentIntent that never held the money (declined) is an error that
// wraps none of the ports' (unknown).
func (c *Client) Hold(ctx context.Context, req app.ProviderCharge) (app.HoldStatus, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	pi, err := c.locate(ctx, req.IdempotencyKey, req.ReservedAt)
	switch {
	case errors.Is(err, errNotFound):
		return "", fmt.Errorf("%w: %w", app.ErrNoProviderCharge, err)
	case err != nil:
		return "", fmt.Errorf("%w: hold: %w", app.ErrProviderOutcomeUnknown, err)
	}
	held := pi.LatestCharge != nil && pi.LastPaymentError == nil
	switch {
	case pi.Status == stripego.PaymentIntentStatusRequiresCapture:
		return app.HoldActive, nil
	case pi.Status == stripego.PaymentIntentStatusSucceeded:
		return app.HoldCaptured, nil
	case pi.Status == stripego.PaymentIntentStatusCanceled && held && pi.CancellationReason == stripego.PaymentIntentCancellationReasonAutomatic:
		return app.HoldExpired, nil
	case pi.Status == stripego.PaymentIntentStatusCanceled && held:
		return app.HoldVoided, nil
	case pi.Status == stripego.PaymentIntentStatusProcessing:
		return "", fmt.Errorf("%w: PaymentIntent %s is processing", app.ErrProviderOutcomeUnknown, pi.ID)
	default:
		return "", fmt.Errorf("PaymentIntent %s is %s: it holds nothing", pi.ID, pi.Status)
	}
}

// LookupCapture implements app.CaptureProvider: the authorization's
// PaymentIntent, captured under this capture's key (its capture_key) for
// the amount asked. Anything else, the hold still there included, is
// "nothing under the key"; a PaymentIntent not found now is unknown.
func (c *Client) LookupCapture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	pi, err := c.locate(ctx, req.AuthorizationKey, req.AuthorizationReservedAt)
	if err != nil {
		return "", fmt.Errorf("%w: the capture's PaymentIntent: %w", app.ErrProviderOutcomeUnknown, err)
	}
	if pi.Status != stripego.PaymentIntentStatusSucceeded || pi.Metadata[metaCaptureKey] != req.IdempotencyKey {
		return "", fmt.Errorf("%w: PaymentIntent %s is %s, capture_key %q", app.ErrNoProviderCharge, pi.ID, pi.Status, pi.Metadata[metaCaptureKey])
	}
	amount, currency, err := minorUnits(req.Amount)
	if err != nil {
		return "", fmt.Errorf("%w: %w", app.ErrProviderOutcomeUnknown, err)
	}
	if pi.AmountReceived != amount || string(pi.Currency) != currency {
		return "", fmt.Errorf("%w: PaymentIntent %s received %d %s, the capture asked for %d %s", app.ErrProviderOutcomeUnknown, pi.ID, pi.AmountReceived, pi.Currency, amount, currency)
	}
	return app.ProviderApproved, nil
}

// LookupVoid implements app.VoidProvider: the authorization's
// PaymentIntent, canceled after it held the money, for a reason other than
// its lapse. A cancel carries no key of ours, so a cancel by someone else
// (the Dashboard) reads as this void: the hold is released either way.
func (c *Client) LookupVoid(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	pi, err := c.locate(ctx, req.AuthorizationKey, req.AuthorizationReservedAt)
	if err != nil {
		return "", fmt.Errorf("%w: the void's PaymentIntent: %w", app.ErrProviderOutcomeUnknown, err)
	}
	held := pi.LatestCharge != nil && pi.LastPaymentError == nil
	if pi.Status != stripego.PaymentIntentStatusCanceled || !held || pi.CancellationReason == stripego.PaymentIntentCancellationReasonAutomatic {
		return "", fmt.Errorf("%w: PaymentIntent %s is %s (cancellation_reason %q)", app.ErrNoProviderCharge, pi.ID, pi.Status, pi.CancellationReason)
	}
	return app.ProviderApproved, nil
}

// LookupRefund implements app.RefundProvider: the refunds of the payment's
// PaymentIntent (the List API, strongly consistent), for the one whose
// metadata carries the key.
func (c *Client) LookupRefund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	pi, err := c.locate(ctx, paymentKey(req), req.PaymentReservedAt)
	if err != nil {
		return "", fmt.Errorf("%w: the refund's PaymentIntent: %w", app.ErrProviderOutcomeUnknown, err)
	}
	return c.refundOf(ctx, pi, req)
}

// refundOf lists pi's refunds for the one req's key names.
func (c *Client) refundOf(ctx context.Context, pi *stripego.PaymentIntent, req app.ProviderRefund) (app.ProviderDecision, error) {
	params := &stripego.RefundListParams{ListParams: stripego.ListParams{Limit: stripego.Int64(pageSize)}, PaymentIntent: stripego.String(pi.ID)}
	seen := 0
	for r, err := range c.api.V1Refunds.List(ctx, params) {
		if err != nil {
			return "", fmt.Errorf("%w: refunds of %s: %w", app.ErrProviderOutcomeUnknown, pi.ID, err)
		}
		if seen++; seen > c.cfg.MaxLookupPages*pageSize {
			return "", fmt.Errorf("%w: PaymentIntent %s has more than %d refunds", app.ErrProviderOutcomeUnknown, pi.ID, c.cfg.MaxLookupPages*pageSize)
		}
		if r.Metadata[metaProviderKey] != req.IdempotencyKey {
			continue
		}
		amount, currency, err := minorUnits(req.Refund.Amount)
		if err != nil {
			return "", fmt.Errorf("%w: %w", app.ErrProviderOutcomeUnknown, err)
		}
		if err := refundDescribes(r, req.IdempotencyKey, pi.ID, amount, currency); err != nil {
			return "", err
		}
		return refundDecision(r)
	}
	return "", fmt.Errorf("%w: no refund of %s carries the key", app.ErrNoProviderCharge, pi.ID)
}
