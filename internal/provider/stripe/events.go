package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// SignatureHeader is the header Stripe signs its deliveries in.
const SignatureHeader = "Stripe-Signature"

// EventTolerance is how far from now a delivery's signing time may be:
// stripe-go's default, 300 s; an older one is refused as a replay.
const EventTolerance = webhook.DefaultTolerance

// EventReader authenticates Stripe's webhook deliveries and reads each into
// the provider event the service applies (app.ApplyProviderEvent).
type EventReader struct {
	secret    string
	tolerance time.Duration
}

// NewEventReader reads deliveries signed with secret (whsec_...).
func NewEventReader(secret string) *EventReader {
	return &EventReader{secret: secret, tolerance: EventTolerance}
}

// SignatureHeader names the header the signature comes in.
func (r *EventReader) SignatureHeader() string { return SignatureHeader }

// Read verifies body's signature (Stripe-Signature: t=...,v1=hex of
// HMAC-SHA256 over "t.body", within EventTolerance) and reads it.
//
// The API version is pinned: stripe-go sends its own (stripe.APIVersion)
// with every request, and an event of any other version is refused
// (ErrEventInvalid), since its objects may read otherwise; the endpoint
// must be created with the pinned version.
//
// What is read (every other type is acknowledged and not applied, with a
// Note, since Stripe sends again anything but a 2xx, for days):
//
//   - payment_intent.succeeded: a charge approved, or, for a PaymentIntent
//     with capture_method manual, its capture (the capture_key the
//     capture wrote into its metadata) approved for amount_received;
//   - payment_intent.amount_capturable_updated: an authorization approved;
//   - payment_intent.payment_failed: a charge or authorization declined;
//   - payment_intent.canceled: a charge declined (nothing taken); for an
//     authorization that held the money, its void (the void's key is the
//     authorization's and ":void") approved, unless Stripe canceled it when
//     its capture window ended (cancellation_reason automatic): a lapse,
//     noted, which the completer asks the provider about;
//   - refund.created, refund.updated, refund.failed, charge.refund.updated
//     (their object is the Refund, with our key in its metadata): the
//     refund approved or declined, once it is no longer pending.
//     (charge.refunded carries the Charge only, which names no refund.)
//
// An object whose metadata carries no key of ours was not made by this
// service: noted.
func (r *EventReader) Read(body []byte, signature string) (app.ProviderEvent, error) {
	e, err := webhook.ConstructEventWithOptions(body, signature, r.secret, webhook.ConstructEventOptions{
		Tolerance: r.tolerance, IgnoreAPIVersionMismatch: true, // checked exactly below
	})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return app.ProviderEvent{}, fmt.Errorf("%w: %w", app.ErrEventNotAuthentic, err)
	case err != nil:
		return app.ProviderEvent{}, fmt.Errorf("%w: %w", app.ErrEventInvalid, err)
	case e.APIVersion != stripego.APIVersion:
		return app.ProviderEvent{}, fmt.Errorf("%w: event %s is of API version %q; this service reads %q only (create the webhook endpoint with it)",
			app.ErrEventInvalid, e.ID, e.APIVersion, stripego.APIVersion)
	case e.ID == "" || e.Data == nil:
		return app.ProviderEvent{}, fmt.Errorf("%w: the event has no id or no data", app.ErrEventInvalid)
	}
	ev := app.ProviderEvent{ID: e.ID, Provider: Name, Type: string(e.Type), Raw: body}
	switch e.Type {
	case stripego.EventTypePaymentIntentSucceeded, stripego.EventTypePaymentIntentAmountCapturableUpdated,
		stripego.EventTypePaymentIntentPaymentFailed, stripego.EventTypePaymentIntentCanceled:
		var pi stripego.PaymentIntent
		if err := json.Unmarshal(e.Data.Raw, &pi); err != nil {
			return app.ProviderEvent{}, fmt.Errorf("%w: event %s's PaymentIntent: %w", app.ErrEventInvalid, e.ID, err)
		}
		return paymentIntentEvent(ev, e.Type, &pi)
	case stripego.EventTypeRefundCreated, stripego.EventTypeRefundUpdated, stripego.EventTypeRefundFailed, stripego.EventTypeChargeRefundUpdated:
		var rf stripego.Refund
		if err := json.Unmarshal(e.Data.Raw, &rf); err != nil {
			return app.ProviderEvent{}, fmt.Errorf("%w: event %s's Refund: %w", app.ErrEventInvalid, e.ID, err)
		}
		return refundEvent(ev, &rf)
	default:
		ev.Note = "a type this service does not read"
		return ev, nil
	}
}

// paymentIntentEvent reads an event about a PaymentIntent.
func paymentIntentEvent(ev app.ProviderEvent, typ stripego.EventType, pi *stripego.PaymentIntent) (app.ProviderEvent, error) {
	key := pi.Metadata[metaProviderKey]
	if key == "" {
		ev.Note = "a PaymentIntent this service did not make"
		return ev, nil
	}
	manual := pi.CaptureMethod == stripego.PaymentIntentCaptureMethodManual
	held := pi.LatestCharge != nil && pi.LastPaymentError == nil
	object, amount := app.ObjectCharge, pi.Amount
	if manual {
		object = app.ObjectAuthorization
	}
	ev.ProviderKey = key
	switch {
	case typ == stripego.EventTypePaymentIntentSucceeded && manual:
		ev.ProviderKey = pi.Metadata[metaCaptureKey]
		if ev.ProviderKey == "" {
			ev.Note = "a capture this service did not make"
			return ev, nil
		}
		object, amount, ev.Decision = app.ObjectCapture, pi.AmountReceived, app.ProviderApproved
	case typ == stripego.EventTypePaymentIntentSucceeded:
		amount, ev.Decision = pi.AmountReceived, app.ProviderApproved
	case typ == stripego.EventTypePaymentIntentAmountCapturableUpdated && manual && pi.Status == stripego.PaymentIntentStatusRequiresCapture:
		ev.Decision = app.ProviderApproved
	case typ == stripego.EventTypePaymentIntentAmountCapturableUpdated:
		ev.Note = "the PaymentIntent holds nothing to capture now"
		return ev, nil
	case typ == stripego.EventTypePaymentIntentPaymentFailed:
		ev.Decision = app.ProviderDeclined
	case manual && held && pi.CancellationReason == stripego.PaymentIntentCancellationReasonAutomatic:
		ev.Note = "a lapsed hold: the completer asks the provider"
		return ev, nil
	case manual && held:
		// The void's key is the authorization's and ":void"
		// (domain.Transition.ProviderIdempotencyKey): a cancel carries no
		// metadata of its own.
		object, ev.ProviderKey, ev.Decision = app.ObjectVoid, key+":"+string(domain.TransitionVoid), app.ProviderApproved
	default: // canceled, having taken or held nothing
		ev.Decision = app.ProviderDeclined
	}
	m, err := moneyOf(amount, string(pi.Currency))
	if err != nil {
		return app.ProviderEvent{}, fmt.Errorf("%w: event %s: %w", app.ErrEventInvalid, ev.ID, err)
	}
	ev.Object, ev.Amount, ev.Currency = object, m.Amount(), string(m.Currency())
	return ev, nil
}

// refundEvent reads an event about a Refund.
func refundEvent(ev app.ProviderEvent, rf *stripego.Refund) (app.ProviderEvent, error) {
	key := rf.Metadata[metaProviderKey]
	if key == "" {
		ev.Note = "a refund this service did not make"
		return ev, nil
	}
	switch rf.Status {
	case stripego.RefundStatusSucceeded:
		ev.Decision = app.ProviderApproved
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		ev.Decision = app.ProviderDeclined
	default:
		ev.Note = "the refund is " + string(rf.Status) + ": a later event settles it"
		return ev, nil
	}
	m, err := moneyOf(rf.Amount, string(rf.Currency))
	if err != nil {
		return app.ProviderEvent{}, fmt.Errorf("%w: event %s: %w", app.ErrEventInvalid, ev.ID, err)
	}
	ev.Object, ev.ProviderKey, ev.Amount, ev.Currency = app.ObjectRefund, key, m.Amount(), string(m.Currency())
	return ev, nil
}

// moneyOf is Stripe's amount in minor units of its lower-case currency.
func moneyOf(units int64, currency string) (domain.Money, error) {
	c, err := domain.ParseCurrency(strings.ToUpper(currency))
	if err != nil {
		return domain.Money{}, err
	}
	return domain.MoneyOfMinorUnits(units, c)
}
