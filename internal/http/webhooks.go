package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/webhooksig"
)

// POST /webhooks/{provider}: a provider's signed events (decision 0021),
// the sandbox's (signed with internal/webhooksig) and Stripe's
// (Stripe-Signature, read by internal/provider/stripe). No API key: the
// signature authenticates the delivery. A refused delivery stores
// nothing, and its problem says only what a sender can act on: not
// configured (503), not authenticated (401: no header, a malformed one, no
// matching signature, or a time outside the tolerance, told apart in the
// log only), a body that is not an event it reads (400: another API
// version among them), or too large (413). An event it does not apply (a
// type it does not read, an object it did not make) is acknowledged, 200,
// since a provider sends anything else again, for days.

// sandboxEvent is the body the sandbox provider delivers: its event id,
// the type, when it was made, and the object as its lookup answers it.
// Fields it may add later are ignored.
type sandboxEvent struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"`
	Created time.Time      `json:"created"`
	Data    sandboxDecided `json:"data"`
}

// sandboxDecided is the part of the provider's ChargeAnswer or
// RefundAnswer the service reads.
type sandboxDecided struct {
	IdempotencyKey string          `json:"idempotencyKey"`
	Status         string          `json:"status"`
	Amount         json.RawMessage `json:"amount"` // a decimal string, as money always is here
	Currency       string          `json:"currency"`
}

// sandboxEventTypes are the event types, each with its object and the
// status its data must carry.
var sandboxEventTypes = map[string]struct {
	object   app.ProviderObject
	decision app.ProviderDecision
	status   string
}{
	"charge.succeeded": {app.ObjectCharge, app.ProviderApproved, "succeeded"},
	"charge.declined":  {app.ObjectCharge, app.ProviderDeclined, "declined"},
	"refund.succeeded": {app.ObjectRefund, app.ProviderApproved, "succeeded"},
	"refund.declined":  {app.ObjectRefund, app.ProviderDeclined, "declined"},
	// A two-step payment's: the authorization is the payment's charge.
	"authorization.succeeded": {app.ObjectAuthorization, app.ProviderApproved, "succeeded"},
	"authorization.declined":  {app.ObjectAuthorization, app.ProviderDeclined, "declined"},
	"capture.succeeded":       {app.ObjectCapture, app.ProviderApproved, "succeeded"},
	"capture.declined":        {app.ObjectCapture, app.ProviderDeclined, "declined"},
	"void.succeeded":          {app.ObjectVoid, app.ProviderApproved, "succeeded"},
	"void.declined":           {app.ObjectVoid, app.ProviderDeclined, "declined"},
	// A modification the provider received and then failed (its
	// received mode): nothing moved.
	"refund.failed":  {app.ObjectRefund, app.ProviderFailed, "failed"},
	"capture.failed": {app.ObjectCapture, app.ProviderFailed, "failed"},
	"void.failed":    {app.ObjectVoid, app.ProviderFailed, "failed"},
	// A hold that lapsed is noted, not applied: the completer's runs ask
	// the provider about every hold (ExpireLapsedAuthorizations), and a
	// lapse is recorded from that answer alone.
	"authorization.expired": {app.ObjectAuthorization, "", "succeeded"},
}

// maxEventIDLength bounds the provider's event id, which is stored.
const maxEventIDLength = 255

// parseSandboxEvent reads an authenticated body into an event, or says
// why it is not one.
func parseSandboxEvent(provider domain.ProviderName, body []byte) (app.ProviderEvent, string) {
	var ev sandboxEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&ev); err != nil || dec.More() {
		return app.ProviderEvent{}, "the body is not one JSON event"
	}
	kind, ok := sandboxEventTypes[ev.Type]
	switch {
	case ev.ID == "" || len(ev.ID) > maxEventIDLength:
		return app.ProviderEvent{}, "id must be 1 to 255 characters"
	case !ok:
		return app.ProviderEvent{}, "type must be one of charge.*, refund.*, authorization.*, capture.* or void.* (succeeded, declined; refund.failed, capture.failed, void.failed; authorization.expired)"
	case ev.Data.Status != kind.status:
		return app.ProviderEvent{}, "data.status must agree with the type"
	case ev.Data.IdempotencyKey == "" || ev.Data.Currency == "":
		return app.ProviderEvent{}, "data must carry idempotencyKey, amount and currency"
	}
	var amount decimal.Decimal
	if !bytes.HasPrefix(ev.Data.Amount, []byte(`"`)) || amount.UnmarshalJSON(ev.Data.Amount) != nil {
		return app.ProviderEvent{}, "data.amount must be a decimal string"
	}
	return app.ProviderEvent{
		ID: ev.ID, Provider: provider, Object: kind.object, Decision: kind.decision,
		ProviderKey: ev.Data.IdempotencyKey, Amount: amount, Currency: ev.Data.Currency,
		Type: ev.Type, Raw: body,
	}, ""
}

// ProviderEventReader authenticates one provider's webhook deliveries and
// reads each into the event app.ApplyProviderEvent applies: an adapter's
// (internal/provider/stripe's EventReader), or the sandbox's below.
type ProviderEventReader interface {
	// SignatureHeader names the header the delivery's signature comes in.
	SignatureHeader() string
	// Read verifies the signature over body and reads the event. Errors
	// wrap app.ErrEventNotAuthentic (401) or app.ErrEventInvalid (400);
	// an event without a Decision is acknowledged (200) and not applied,
	// its Note saying why.
	Read(body []byte, signature string) (app.ProviderEvent, error)
}

// sandboxProvider is the sandbox, as the API names it (paymentProvider
// "sandbox").
const sandboxProvider domain.ProviderName = "sandbox"

// stripeProvider is Stripe, as the API names it.
const stripeProvider domain.ProviderName = "stripe"

// signatureHeaders are the headers each provider signs its deliveries in,
// as api/openapi.yaml's webhook routes require them.
var signatureHeaders = map[domain.ProviderName]string{sandboxProvider: webhooksig.Header, stripeProvider: "Stripe-Signature"}

// sandboxReader reads the sandbox's deliveries, signed with
// internal/webhooksig under WEBHOOK_SECRETS.
type sandboxReader struct {
	secrets   [][]byte
	tolerance time.Duration
}

func (sandboxReader) SignatureHeader() string { return webhooksig.Header }

func (r sandboxReader) Read(body []byte, signature string) (app.ProviderEvent, error) {
	if err := webhooksig.Verify(signature, body, r.secrets, time.Now(), r.tolerance); err != nil {
		return app.ProviderEvent{}, fmt.Errorf("%w: %w", app.ErrEventNotAuthentic, err)
	}
	ev, why := parseSandboxEvent(sandboxProvider, body)
	if why != "" {
		return app.ProviderEvent{}, fmt.Errorf("%w: %s", app.ErrEventInvalid, why)
	}
	if ev.Decision == "" {
		ev.Note = "a lapsed hold: the completer asks the provider"
	}
	return ev, nil
}

// webhookHandlers serve one provider's deliveries.
type webhookHandlers struct {
	provider domain.ProviderName
	apply    *app.ApplyProviderEvent
	offered  bool                // the service charges through provider
	reader   ProviderEventReader // nil: not configured
	logger   *slog.Logger
	events   *prometheus.CounterVec
}

// The results of a delivery that the handler itself decides, besides the
// app's ProviderEventResult values.
const (
	deliveryUnknownObject = "unknown_object"
	deliveryRefused       = "refused"
	deliveryInvalid       = "invalid"
	deliveryTooLarge      = "too_large"
	deliveryNotConfigured = "not_configured"
	deliveryFailed        = "failed"
	deliveryNoted         = "noted"
)

// deliveryResults are every result label of payment_provider_events_total,
// with what the counter's help says of each.
var deliveryResults = []struct{ label, note string }{
	{string(app.EventApplied), ""},
	{string(app.EventDuplicate), ""},
	{string(app.EventAgreed), ""},
	{string(app.EventContradicts), "kept in provider_event_contradiction"},
	{deliveryUnknownObject, ""},
	{deliveryRefused, "not authenticated"},
	{deliveryInvalid, ""},
	{deliveryTooLarge, ""},
	{deliveryNotConfigured, ""},
	{deliveryFailed, ""},
	{deliveryNoted, "acknowledged, not applied: a lapsed hold the completer asks about, a type or an object the service does not read"},
}

// newWebhookHandlers builds the handlers of every provider's deliveries;
// events counts every delivery by its provider and result
// (payment_provider_events_total). A provider's route is configured when
// the service charges through it and holds its secret.
func newWebhookHandlers(d Deps, reg prometheus.Registerer) []*webhookHandlers {
	labels := make([]string, len(deliveryResults))
	for i, r := range deliveryResults {
		labels[i] = r.label
		if r.note != "" {
			labels[i] += " (" + r.note + ")"
		}
	}
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payment_provider_events_total",
		Help: "Provider event deliveries (webhooks) by result: " + strings.Join(labels, ", ") + ".",
	}, []string{"provider", "result"})
	reg.MustRegister(events)
	offered := map[domain.ProviderName]bool{}
	for _, p := range d.Providers {
		offered[p] = true
	}
	readers := map[domain.ProviderName]ProviderEventReader{}
	if len(d.Webhooks.Secrets) > 0 {
		secrets := make([][]byte, len(d.Webhooks.Secrets))
		for i, s := range d.Webhooks.Secrets {
			secrets[i] = s.Bytes()
		}
		readers[sandboxProvider] = sandboxReader{secrets: secrets, tolerance: d.Webhooks.Tolerance}
	}
	if d.StripeEvents != nil {
		readers[stripeProvider] = d.StripeEvents
	}
	var hs []*webhookHandlers
	for _, p := range []domain.ProviderName{sandboxProvider, stripeProvider} {
		h := &webhookHandlers{provider: p, offered: offered[p], apply: d.ApplyProviderEvent, logger: d.Logger, events: events}
		if offered[p] && d.ApplyProviderEvent != nil {
			h.reader = readers[p]
		}
		if offered[p] {
			// Every series of the provider the service charges through
			// exists from the start at 0, so that increase() sees the first
			// contradiction (the alert PaymentProviderEventContradictions).
			for _, r := range deliveryResults {
				events.WithLabelValues(string(p), r.label)
			}
		}
		hs = append(hs, h)
	}
	return hs
}

// deliver is POST /webhooks/{provider}.
func (h *webhookHandlers) deliver(c echo.Context) error {
	result, err := h.handle(c)
	h.events.WithLabelValues(string(h.provider), result).Inc()
	return err
}

func (h *webhookHandlers) handle(c echo.Context) (result string, err error) {
	ctx := c.Request().Context()
	// An unsigned delivery is refused before anything else, so that it
	// learns nothing of the configuration. A provider the service does not
	// charge through has nothing here its events could settle: the route
	// is not this deployment's. One it charges through without a secret is
	// misconfigured, and the provider's redelivery after the fix is
	// applied: 503, not 404.
	switch header := signatureHeaders[h.provider]; {
	case c.Request().Header.Get(header) == "":
		h.logger.WarnContext(ctx, "webhook delivery refused", "provider", h.provider, "reason", "no "+header+" header")
		return deliveryRefused, signatureInvalid(header)
	case !h.offered:
		return deliveryNotConfigured, newProblem(http.StatusNotFound, codeWebhooksNotOffered, "Webhooks not offered",
			"This service does not charge through this provider, so it takes none of its events. Nothing was stored.")
	case h.reader == nil:
		p := newProblem(http.StatusServiceUnavailable, codeWebhooksNotConfigured, "Webhooks not configured",
			"This service charges through this provider but holds no secret to verify its deliveries with. Nothing was stored; deliver again later.")
		p.retryAfter = time.Minute
		return deliveryNotConfigured, p
	}
	if err := jsonContent(c.Request()); err != nil {
		return deliveryInvalid, err
	}
	body, err := readBody(c)
	if p := (*Problem)(nil); errors.As(err, &p) && p.Status == http.StatusRequestEntityTooLarge {
		return deliveryTooLarge, err
	} else if err != nil {
		return deliveryInvalid, err
	}
	// Which check failed goes to the log only: a forger learns nothing
	// from the answer. The error names the check, never a secret.
	ev, err := h.reader.Read(body, c.Request().Header.Get(h.reader.SignatureHeader()))
	switch {
	case errors.Is(err, app.ErrEventNotAuthentic):
		h.logger.WarnContext(ctx, "webhook delivery refused", "provider", h.provider, "reason", err)
		return deliveryRefused, signatureInvalid(h.reader.SignatureHeader())
	case err != nil:
		// Another API version than the one pinned among them: logged, for
		// the operator who must create the endpoint with the pinned one.
		h.logger.WarnContext(ctx, "webhook delivery unreadable", "provider", h.provider, "reason", err)
		why := strings.TrimPrefix(err.Error(), app.ErrEventInvalid.Error()+": ")
		return deliveryInvalid, newProblem(http.StatusBadRequest, codeWebhookEventInvalid, "Webhook event invalid", why+". Nothing was stored.")
	case ev.Decision == "":
		h.logger.DebugContext(ctx, "webhook delivery acknowledged, not applied", "provider", h.provider, "event_id", ev.ID, "event_type", ev.Type, "note", ev.Note)
		return deliveryNoted, c.JSON(http.StatusOK, map[string]string{"result": deliveryNoted})
	}
	applied, err := h.apply.Handle(ctx, ev)
	switch {
	case errors.Is(err, app.ErrUnknownProviderObject):
		h.logger.WarnContext(ctx, "webhook for an object the service does not hold; the provider will deliver it again",
			"provider", h.provider, "event_id", ev.ID, "event_type", ev.Type, "provider_key", ev.ProviderKey)
		return deliveryUnknownObject, newProblem(http.StatusNotFound, codeWebhookObjectUnknown, "Object unknown",
			"No payment or refund of this service has the event's key. Nothing was stored; deliver it again later.")
	case errors.Is(err, app.ErrReportContended):
		p := newProblem(http.StatusServiceUnavailable, codeServiceUnavailable, "Service unavailable",
			"The event's object was changing while the event was applied. Nothing was stored; deliver it again.")
		p.retryAfter = retryAfterDefault
		return deliveryFailed, p
	case err != nil:
		return deliveryFailed, err
	}
	return string(applied), c.JSON(http.StatusOK, map[string]string{"result": string(applied)})
}

// webhookPath is the route of a provider's deliveries.
func webhookPath(provider domain.ProviderName) string {
	return "/webhooks/" + strings.ToLower(string(provider))
}

// signatureInvalid is the answer to a delivery that is not authenticated.
func signatureInvalid(header string) *Problem {
	return newProblem(http.StatusUnauthorized, codeWebhookSignatureInvalid, "Webhook signature invalid",
		"The delivery is not authenticated: send it with a valid, current "+header+" header over the exact body. Nothing was stored.")
}
