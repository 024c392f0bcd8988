package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"

	"github.com/example/payment-service/internal/app"
)

// Charge implements app.ChargeProvider: a PaymentIntent created and
// confirmed at once, captured automatically.
func (c *Client) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return c.create(ctx, req, false)
}

// Authorize implements app.AuthorizationProvider: the same PaymentIntent
// with capture_method manual, which holds the amount until a capture, a
// cancel (our void) or Stripe's capture window ends it.
func (c *Client) Authorize(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	return c.create(ctx, req, true)
}

// create sends the one POST /v1/payment_intents of a charge or an
// authorization, and sorts its answer.
func (c *Client) create(ctx context.Context, req app.ProviderCharge, manual bool) (app.ProviderDecision, error) {
	what := map[bool]string{false: "charge", true: "authorization"}[manual]
	amount, currency, err := minorUnits(req.Charge.Amount)
	if err != nil {
		return "", err
	}
	if req.Charge.PaymentMethod == "" {
		// Stripe confirms a PaymentIntent with a payment method only.
		return "", fmt.Errorf("%w: a Stripe %s needs a payment method (paymentMethod); nothing was sent", app.ErrProviderRefused, what)
	}
	if !req.ReservedAt.IsZero() && c.cfg.Now().Sub(req.ReservedAt) > keyLifetime {
		// Stripe forgets a key after 24 h: this POST would be a new request
		// to it, and could charge a second time. Only a lookup may say
		// what the first attempts did.
		return "", fmt.Errorf("%w: the %s was reserved at %s, longer ago than Stripe keeps its key; nothing was sent, the lookup says what was made",
			app.ErrProviderNotCharged, what, req.ReservedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	key, err := metadataValue(req.IdempotencyKey)
	if err != nil {
		return "", err
	}
	captureMethod := stripego.PaymentIntentCaptureMethodAutomatic
	if manual {
		captureMethod = stripego.PaymentIntentCaptureMethodManual
	}
	// The create is the one call on every charge's path, so it is sent as
	// stripe-go would send PaymentIntentCreateParams, with its own form
	// encoding but not its reflection over the params, and its answer is
	// read into the fields the adapter reads (intentAnswer), not into the
	// whole PaymentIntent, which stripe-go reads twice over (a charge took
	// the service a third more instructions than the sandbox's before:
	// BenchmarkCharge, docs/benchmarks.md). stripe-mock takes the form as
	// the typed params' (TestStripeMockTakesEveryRequestTheAdapterSends).
	var f form.Values
	f.Add("amount", strconv.FormatInt(amount, 10))
	f.Add("currency", currency)
	f.Add("confirm", "true")
	f.Add("capture_method", string(captureMethod))
	f.Add("payment_method", req.Charge.PaymentMethod)
	f.Add("payment_method_types[0]", "card")
	f.Add("metadata["+metaProviderKey+"]", key)
	f.Add("metadata["+metaExternalID+"]", string(req.Charge.ExternalPaymentID))
	var sent sentFlag
	_, base := post(ctx, req.IdempotencyKey, &sent)
	check := func(pi *stripego.PaymentIntent) error { return describes(pi, key, amount, currency) }
	var answer intentAnswer
	if err := c.backend.CallRaw(http.MethodPost, "/v1/payment_intents", c.cfg.SecretKey, []byte(f.Encode()), &base, &answer); err != nil {
		if declined, err := declineOf(err, check); declined {
			return decided(app.ProviderDeclined, err)
		}
		return "", sortError(err, &sent, what)
	}
	pi := answer.intent()
	if err := check(pi); err != nil {
		return "", err
	}
	return decisionOf(pi, manual)
}

// intentAnswer is what the adapter reads of a PaymentIntent Stripe
// answers a create with: the fields describes and decisionOf look at, the
// others (a PaymentIntent has dozens) skipped as the JSON is read.
type intentAnswer struct {
	stripego.APIResource
	ID                 string                                   `json:"id"`
	Amount             int64                                    `json:"amount"`
	AmountReceived     int64                                    `json:"amount_received"`
	Currency           stripego.Currency                        `json:"currency"`
	Status             stripego.PaymentIntentStatus             `json:"status"`
	CaptureMethod      stripego.PaymentIntentCaptureMethod      `json:"capture_method"`
	CancellationReason stripego.PaymentIntentCancellationReason `json:"cancellation_reason"`
	Metadata           map[string]string                        `json:"metadata"`
	LatestCharge       json.RawMessage                          `json:"latest_charge"` // an id, or the Charge expanded
	LastPaymentError   json.RawMessage                          `json:"last_payment_error"`
}

// intent is the answer as a PaymentIntent, its latest charge and last
// payment error there (empty) when the answer has them.
func (a *intentAnswer) intent() *stripego.PaymentIntent {
	pi := &stripego.PaymentIntent{ID: a.ID, Amount: a.Amount, AmountReceived: a.AmountReceived, Currency: a.Currency,
		Status: a.Status, CaptureMethod: a.CaptureMethod, CancellationReason: a.CancellationReason, Metadata: a.Metadata}
	if present(a.LatestCharge) {
		pi.LatestCharge = &stripego.Charge{}
	}
	if present(a.LastPaymentError) {
		pi.LastPaymentError = &stripego.Error{}
	}
	return pi
}

// present says whether a JSON value is there and not null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// decided is a decision, unless err says it cannot be trusted.
func decided(d app.ProviderDecision, err error) (app.ProviderDecision, error) {
	if err != nil {
		return "", err
	}
	return d, nil
}

// describes says whether pi is the PaymentIntent made for our key, of
// amount in currency; an answer about another one is never trusted.
func describes(pi *stripego.PaymentIntent, key string, amount int64, currency string) error {
	switch {
	case pi.Metadata[metaProviderKey] != key:
		return fmt.Errorf("%w: the answer is about PaymentIntent %s, made for the key %q", app.ErrProviderOutcomeUnknown, pi.ID, pi.Metadata[metaProviderKey])
	case pi.Amount != amount || string(pi.Currency) != currency:
		return fmt.Errorf("%w: PaymentIntent %s is for %d %s, the request for %d %s", app.ErrProviderOutcomeUnknown, pi.ID, pi.Amount, pi.Currency, amount, currency)
	}
	return nil
}

// decisionOf is what a PaymentIntent's status says of the charge
// (manual: the authorization) it was made for:
//
//   - succeeded: approved (for an authorization: captured since, and the
//     authorization stands);
//   - requires_capture: an authorization approved (a charge that holds:
//     unknown);
//   - processing: unknown, until the webhook (payment_intent.succeeded or
//     .payment_failed) or a later lookup;
//   - requires_action: declined: 3-D Secure is asked for, which a charge
//     made by a server cannot complete;
//   - requires_payment_method after a payment error: declined;
//   - canceled: declined, nothing was taken; for an authorization that
//     held the money (it has a charge and no payment error), approved: it
//     was voided or lapsed since, other commands' outcomes;
//   - anything else: unknown.
func decisionOf(pi *stripego.PaymentIntent, manual bool) (app.ProviderDecision, error) {
	held := pi.LatestCharge != nil && pi.LastPaymentError == nil
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		return app.ProviderApproved, nil
	case stripego.PaymentIntentStatusRequiresCapture:
		if manual {
			return app.ProviderApproved, nil
		}
	case stripego.PaymentIntentStatusRequiresAction:
		return app.ProviderDeclined, nil
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError != nil {
			return app.ProviderDeclined, nil
		}
	case stripego.PaymentIntentStatusCanceled:
		if manual && held {
			return app.ProviderApproved, nil
		}
		return app.ProviderDeclined, nil
	}
	return "", fmt.Errorf("%w: PaymentIntent %s is %s (capture_method %s)", app.ErrProviderOutcomeUnknown, pi.ID, pi.Status, pi.CaptureMethod)
}

// Capture implements app.CaptureProvider: the capture of the
// authorization's PaymentIntent, found by its key around its reservation
// (locate); a capture of less than is held releases the rest. The
// capture's key rides in the PaymentIntent's metadata (capture_key) as
// well as in the header, for its lookup and its event. A hold Stripe no
// longer has (captured, canceled, lapsed) or an amount above it is
// refused for good (400).
func (c *Client) Capture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	amount, currency, err := minorUnits(req.Amount)
	if err != nil {
		return "", err
	}
	key, err := metadataValue(req.IdempotencyKey)
	if err != nil {
		return "", err
	}
	pi, err := c.locate(ctx, req.AuthorizationKey, req.AuthorizationReservedAt)
	if err != nil {
		return "", notNow("capture", err)
	}
	return c.capture(ctx, pi, req, key, amount, currency)
}

// capture sends the one POST of a capture of pi.
func (c *Client) capture(ctx context.Context, pi *stripego.PaymentIntent, req app.ProviderCapture, key string, amount int64, currency string) (app.ProviderDecision, error) {
	var sent sentFlag
	postCtx, base := post(ctx, req.IdempotencyKey, &sent)
	got, err := c.api.V1PaymentIntents.Capture(postCtx, pi.ID, &stripego.PaymentIntentCaptureParams{
		Params:          base,
		AmountToCapture: stripego.Int64(amount),
		Metadata:        map[string]string{metaCaptureKey: key},
	})
	if err != nil {
		if declined, err := declineOf(err, nil); declined {
			return decided(app.ProviderDeclined, err)
		}
		return "", sortError(err, &sent, "capture")
	}
	switch {
	case got.ID != pi.ID || got.Metadata[metaCaptureKey] != key:
		return "", fmt.Errorf("%w: the capture's answer is about PaymentIntent %s (capture_key %q)", app.ErrProviderOutcomeUnknown, got.ID, got.Metadata[metaCaptureKey])
	case got.AmountReceived != amount || string(got.Currency) != currency:
		return "", fmt.Errorf("%w: PaymentIntent %s received %d %s, the capture asked for %d %s", app.ErrProviderOutcomeUnknown, got.ID, got.AmountReceived, got.Currency, amount, currency)
	case got.Status != stripego.PaymentIntentStatusSucceeded:
		return "", fmt.Errorf("%w: PaymentIntent %s is %s after its capture", app.ErrProviderOutcomeUnknown, got.ID, got.Status)
	}
	return app.ProviderApproved, nil
}

// Void implements app.VoidProvider: the cancel of the authorization's
// PaymentIntent. A cancel takes no metadata: the void's key rides in the
// header only.
func (c *Client) Void(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	pi, err := c.locate(ctx, req.AuthorizationKey, req.AuthorizationReservedAt)
	if err != nil {
		return "", notNow("void", err)
	}
	return c.cancel(ctx, pi, req)
}

// cancel sends the one POST of a void of pi.
func (c *Client) cancel(ctx context.Context, pi *stripego.PaymentIntent, req app.ProviderVoid) (app.ProviderDecision, error) {
	var sent sentFlag
	postCtx, base := post(ctx, req.IdempotencyKey, &sent)
	got, err := c.api.V1PaymentIntents.Cancel(postCtx, pi.ID, &stripego.PaymentIntentCancelParams{Params: base})
	if err != nil {
		return "", sortError(err, &sent, "void")
	}
	switch {
	case got.ID != pi.ID || got.Metadata[metaProviderKey] != req.AuthorizationKey:
		return "", fmt.Errorf("%w: the void's answer is about PaymentIntent %s (provider_key %q)", app.ErrProviderOutcomeUnknown, got.ID, got.Metadata[metaProviderKey])
	case got.Status != stripego.PaymentIntentStatusCanceled:
		return "", fmt.Errorf("%w: PaymentIntent %s is %s after its cancel", app.ErrProviderOutcomeUnknown, got.ID, got.Status)
	}
	return app.ProviderApproved, nil
}

// Refund implements app.RefundProvider: a Refund of the payment's
// PaymentIntent (captured in one step or two), its key in its metadata.
// Stripe refuses a refund beyond what the PaymentIntent has left (400:
// refused for good).
func (c *Client) Refund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	amount, currency, err := minorUnits(req.Refund.Amount)
	if err != nil {
		return "", err
	}
	if !req.ReservedAt.IsZero() && c.cfg.Now().Sub(req.ReservedAt) > keyLifetime {
		// As for a charge: once Stripe may have forgotten the key, this
		// POST would be a new refund, and could give the money back twice.
		return "", fmt.Errorf("%w: the refund was reserved at %s, longer ago than Stripe keeps its key; nothing was sent, the lookup says what was made",
			app.ErrProviderNotCharged, req.ReservedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	key, err := metadataValue(req.IdempotencyKey)
	if err != nil {
		return "", err
	}
	pi, err := c.locate(ctx, paymentKey(req), req.PaymentReservedAt)
	if err != nil {
		return "", notNow("refund", err)
	}
	return c.refund(ctx, pi, req, key, amount, currency)
}

// refund sends the one POST of a refund of pi.
func (c *Client) refund(ctx context.Context, pi *stripego.PaymentIntent, req app.ProviderRefund, key string, amount int64, currency string) (app.ProviderDecision, error) {
	var sent sentFlag
	postCtx, base := post(ctx, req.IdempotencyKey, &sent)
	got, err := c.api.V1Refunds.Create(postCtx, &stripego.RefundCreateParams{
		Params:        base,
		PaymentIntent: stripego.String(pi.ID),
		Amount:        stripego.Int64(amount),
		Metadata:      map[string]string{metaProviderKey: key, "external_refund_id": string(req.Refund.ExternalRefundID)},
	})
	if err != nil {
		return "", sortError(err, &sent, "refund")
	}
	if err := refundDescribes(got, key, pi.ID, amount, currency); err != nil {
		return "", err
	}
	return refundDecision(got)
}

// paymentKey is the provider key of the refunded payment's PaymentIntent.
func paymentKey(req app.ProviderRefund) string {
	if req.PaymentKey != "" {
		return req.PaymentKey
	}
	return req.ChargeKey
}

// refundDescribes says whether r is the refund made for key, of amount in
// currency, of the PaymentIntent pi.
func refundDescribes(r *stripego.Refund, key, pi string, amount int64, currency string) error {
	switch {
	case r.Metadata[metaProviderKey] != key:
		return fmt.Errorf("%w: the answer is about refund %s, made for the key %q", app.ErrProviderOutcomeUnknown, r.ID, r.Metadata[metaProviderKey])
	case r.PaymentIntent == nil || r.PaymentIntent.ID != pi:
		return fmt.Errorf("%w: refund %s is not of PaymentIntent %s", app.ErrProviderOutcomeUnknown, r.ID, pi)
	case r.Amount != amount || string(r.Currency) != currency:
		return fmt.Errorf("%w: refund %s is for %d %s, the request for %d %s", app.ErrProviderOutcomeUnknown, r.ID, r.Amount, r.Currency, amount, currency)
	}
	return nil
}

// refundDecision is what a refund's status says: succeeded approved,
// failed or canceled declined (the money stays with us, the amount free to
// be refunded again), pending or requires_action unknown until
// refund.updated or a lookup.
func refundDecision(r *stripego.Refund) (app.ProviderDecision, error) {
	switch r.Status {
	case stripego.RefundStatusSucceeded:
		return app.ProviderApproved, nil
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		return app.ProviderDeclined, nil
	default:
		return "", fmt.Errorf("%w: refund %s is %s", app.ErrProviderOutcomeUnknown, r.ID, r.Status)
	}
}

// notNow is a modification that could not find its PaymentIntent: nothing
// was sent, and a later attempt may find it.
func notNow(what string, err error) error {
	return fmt.Errorf("%w: the %s was not sent: %w", app.ErrProviderNotCharged, what, err)
}
