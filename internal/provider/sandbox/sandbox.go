// Package sandbox is the adapter for the sandbox payment provider's HTTP API
// (internal/sandboxprovider, run by cmd/sandbox-provider): it implements
// app.ChargeProvider, app.RefundProvider, app.AuthorizationProvider,
// app.CaptureProvider and app.VoidProvider over a real network
// connection, and sorts every answer into the ports' four cases. Every
// call goes through the same request and classification code; only its
// URL, body, the flag its errors carry and how its answer is known differ
// (operation).
//
// It makes exactly one HTTP request per call and never retries: the use
// case owns retries, and only it knows whether one is safe. That includes
// net/http's own silent retry, which a request with an Idempotency-Key
// header would otherwise get on a reused connection (see newRequest).
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider"
)

// Name is the provider name clients send as paymentProvider.
const Name domain.ProviderName = "sandbox"

// Config locates the provider and bounds each call.
type Config struct {
	// BaseURL is the provider's address, such as http://127.0.0.1:8081.
	BaseURL string
	// ConnectTimeout bounds establishing the connection. A call that cannot
	// connect sent nothing, so it is "not charged".
	ConnectTimeout time.Duration
	// Timeout bounds the whole call, answer included. It must be shorter
	// than the idempotency lock, so that a call ends before a retry may take
	// the key over (internal/config checks it).
	Timeout time.Duration
	// MaxRequestAge is the request bound every request declares
	// (Request-Max-Age): the sandbox refuses a request that arrives later
	// than this after its sending, so once a claim is this old no earlier
	// attempt's request can land, and nothing under the key is a proof
	// (app.LooksUpWithinBound). Zero declares none. It assumes the two
	// clocks agree: the sandbox runs beside the service.
	MaxRequestAge time.Duration
	// Modifications is how the sandbox answers captures, refunds and
	// voids, as it is run (its SANDBOX_MODIFICATIONS): at once (the zero
	// value), or "received" (202) and decided later, as Adyen does
	// (app.AnswersReceived). A receipt from a sandbox declared to answer at
	// once is not taken for one: the core sorts it as unknown.
	Modifications app.ModificationAnswers
}

// Client is the sandbox provider's HTTP API as the ports of charges,
// refunds and two-step payments ask for it (app.ChargeProvider,
// app.RefundProvider, app.AuthorizationProvider, app.CaptureProvider,
// app.VoidProvider).
type Client struct {
	charges        operation
	refunds        operation
	authorizations operation
	captures       operation
	voids          operation
	http           *http.Client
	maxRequestAge  time.Duration
	modifications  app.ModificationAnswers
}

// operation is one kind of call the provider takes: charges, refunds,
// authorizations, captures or voids.
type operation struct {
	noun     string // "charge": in errors
	url      *url.URL
	notFound string // the lookup's error type for "none under the key"
	// nothingDone is the flag of an error answer that says nothing was
	// done: "charged", "refunded", "authorized", "captured" or "voided".
	nothingDone func(errorAnswer) *bool
	// describes reports whether a 200 answer describes the request that
	// want stands for; nil means sameRequest.
	describes func(got, want answer) bool
	// modification: a capture, refund or void, which the sandbox's
	// received mode answers 202 "received".
	modification bool
}

// New returns a client with one connection pool for all calls.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sandbox provider: base URL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	transport := provider.NewTransport(cfg.ConnectTimeout)
	return &Client{
		charges: operation{noun: "charge", url: u.JoinPath("v1", "charges"), notFound: errTypeChargeNotFound,
			nothingDone: func(e errorAnswer) *bool { return e.Error.Charged }},
		refunds: operation{noun: "refund", url: u.JoinPath("v1", "refunds"), notFound: errTypeRefundNotFound,
			nothingDone: func(e errorAnswer) *bool { return e.Error.Refunded }, modification: true},
		authorizations: operation{noun: "authorization", url: u.JoinPath("v1", "authorizations"), notFound: errTypeAuthorizationNotFound,
			nothingDone: func(e errorAnswer) *bool { return e.Error.Authorized }},
		captures: operation{noun: "capture", url: u.JoinPath("v1", "captures"), notFound: errTypeCaptureNotFound,
			nothingDone: func(e errorAnswer) *bool { return e.Error.Captured }, modification: true},
		voids: operation{noun: "void", url: u.JoinPath("v1", "voids"), notFound: errTypeVoidNotFound,
			nothingDone: func(e errorAnswer) *bool { return e.Error.Voided }, describes: sameVoid, modification: true},
		maxRequestAge: cfg.MaxRequestAge,
		modifications: cfg.Modifications,
		http: &http.Client{
			Transport: transport,
			Timeout:   cfg.Timeout,
			// A redirect would be a second request; the provider never sends one.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// chargeRequest, refundRequest, captureRequest, voidRequest and answer
// are the provider's wire format. An authorization's request is a
// charge's.
type chargeRequest struct {
	Amount    string `json:"amount"`
	Currency  string `json:"currency"`
	Reference string `json:"reference"`
}

type refundRequest struct {
	Charge string `json:"charge"`
	chargeRequest
}

type captureRequest struct {
	Authorization string `json:"authorization"`
	chargeRequest
}

// voidRequest sends no reference: the port's void has none, and the
// provider then gives it its authorization's.
type voidRequest struct {
	Authorization string `json:"authorization"`
}

// answer is a decided charge, refund, authorization, capture or void.
// Charge, the refunded charge's (capture's) key, is empty but for a
// refund; Authorization, the authorization's key, but for a capture or a
// void; Hold is an authorization's lookup's only.
type answer struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Status         string          `json:"status"`
	Amount         decimal.Decimal `json:"amount"`
	Currency       string          `json:"currency"`
	Reference      string          `json:"reference"`
	Charge         string          `json:"charge"`
	Authorization  string          `json:"authorization"`
	Hold           string          `json:"hold"`
}

type errorAnswer struct {
	Error struct {
		Type       string `json:"type"`
		Message    string `json:"message"`
		Charged    *bool  `json:"charged"`
		Refunded   *bool  `json:"refunded"`
		Authorized *bool  `json:"authorized"`
		Captured   *bool  `json:"captured"`
		Voided     *bool  `json:"voided"`
	} `json:"error"`
}

// The lookups' error types for "nothing under the key".
const (
	errTypeChargeNotFound        = "charge_not_found"
	errTypeRefundNotFound        = "refund_not_found"
	errTypeAuthorizationNotFound = "authorization_not_found"
	errTypeCaptureNotFound       = "capture_not_found"
	errTypeVoidNotFound          = "void_not_found"
)

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 64 << 10

// MaxKeyLength is the longest idempotency key the sandbox takes.
const MaxKeyLength = 255

// Abilities: the sandbox answers a lookup by our idempotency key with
// "nothing, and nothing being made", refuses a request older than the
// bound it declares, answers a capture, refund or void at once or
// "received" as it is run (Config.Modifications), and takes decimal
// amounts.
func (c *Client) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByKey, RequestBound: c.maxRequestAge,
		Modifications: c.modifications, MaxKeyLength: MaxKeyLength}
}

func (c *Client) Charge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	body, want := describe(req.Charge.Amount, string(req.Charge.ExternalPaymentID), "")
	return c.create(ctx, c.charges, req.IdempotencyKey, body, want)
}

func (c *Client) Refund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	fields, want := describe(req.Refund.Amount, string(req.Refund.ExternalRefundID), req.ChargeKey)
	return c.create(ctx, c.refunds, req.IdempotencyKey, refundRequest{Charge: req.ChargeKey, chargeRequest: fields}, want)
}

// Authorize is Charge in two steps: the amount is held, under the
// authorization's own key, until a capture takes it, a void releases it or
// the provider's time for it passes.
func (c *Client) Authorize(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	body, want := describe(req.Charge.Amount, string(req.Charge.ExternalPaymentID), "")
	return c.create(ctx, c.authorizations, req.IdempotencyKey, body, want)
}

// Capture asks for req.Amount of the money the authorization under
// req.AuthorizationKey holds. The provider refuses it for good (422:
// ErrProviderRefused) when the hold is not active (captured already,
// voided, lapsed, or the authorization not succeeded), or for another
// currency or more than it holds.
func (c *Client) Capture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	fields, want := describe(req.Amount, req.Reference, "")
	want.Authorization = req.AuthorizationKey
	return c.create(ctx, c.captures, req.IdempotencyKey, captureRequest{Authorization: req.AuthorizationKey, chargeRequest: fields}, want)
}

// Void asks for the release of what the authorization under
// req.AuthorizationKey holds; refused for good, as a capture is, when the
// hold is not active.
func (c *Client) Void(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	want := answer{IdempotencyKey: req.IdempotencyKey, Authorization: req.AuthorizationKey}
	return c.create(ctx, c.voids, req.IdempotencyKey, voidRequest{Authorization: req.AuthorizationKey}, want)
}

// describe returns the fields every request has, for amount m under
// reference, and the answer a 200 must give for it (charge: the refunded
// charge's key, empty for a charge).
func describe(m domain.Money, reference, charge string) (chargeRequest, answer) {
	return chargeRequest{Amount: m.AmountString(), Currency: string(m.Currency()), Reference: reference},
		answer{Amount: m.Amount(), Currency: string(m.Currency()), Reference: reference, Charge: charge}
}

// sameRequest: an answer describes a request when it is for its amount,
// currency and reference, and names the same charge (authorization).
func sameRequest(a, want answer) bool {
	return a.Reference == want.Reference && a.Currency == want.Currency && a.Amount.Equal(want.Amount) &&
		a.Charge == want.Charge && a.Authorization == want.Authorization
}

// sameVoid: a void names neither amount nor currency (its answer's are
// the authorization's), nor a reference; its answer is known by its key
// and its authorization, and carries no reference since it was sent none.
func sameVoid(a, want answer) bool {
	return a.IdempotencyKey == want.IdempotencyKey && a.Authorization == want.Authorization && a.Reference == ""
}

// create sends one create call of op and sorts its answer; want is what a
// 200 must describe.
func (c *Client) create(ctx context.Context, op operation, key string, body any, want answer) (app.ProviderDecision, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("%w: encode request: %w", app.ErrProviderNotCharged, err)
	}
	var sent atomic.Bool // set by the transport's writer goroutine
	httpReq, err := newRequest(ctx, op.url.String(), key, payload, c.maxRequestAge, &sent)
	if err != nil {
		return "", fmt.Errorf("%w: build request: %w", app.ErrProviderNotCharged, err)
	}

	resp, err := c.http.Do(httpReq)
	if err != nil {
		if !sent.Load() {
			// The request never left: no connection, or it broke before the
			// request was written. The provider cannot have acted on it.
			return "", fmt.Errorf("%w: request not sent: %w", app.ErrProviderNotCharged, err)
		}
		return "", fmt.Errorf("%w: %w", app.ErrProviderOutcomeUnknown, err)
	}
	defer resp.Body.Close()
	answerBody, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return "", fmt.Errorf("%w: reading the answer (%s): %w", app.ErrProviderOutcomeUnknown, resp.Status, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return decision(op, want, answerBody)
	case resp.StatusCode == http.StatusAccepted && op.modification:
		return receipt(op, want, answerBody)
	}
	return "", classifyRefusal(op, resp.StatusCode, answerBody)
}

// receipt reads a 202: the sandbox received the capture, refund or void
// (its received mode) and decides it later, announcing the decision by
// an event. A 202 that cannot be read, describes another request or says
// anything but "received" is not a receipt: unknown.
func receipt(op operation, want answer, body []byte) (app.ProviderDecision, error) {
	a, err := describing(op, want, body)
	if err != nil {
		return "", err
	}
	if a.Status != statusReceived {
		return "", fmt.Errorf("%w: a 202 for %s %s with status %q", app.ErrProviderOutcomeUnknown, op.noun, a.ID, a.Status)
	}
	return app.ProviderReceived, nil
}

// newRequest builds the POST. sent becomes true once the request has been
// written to a connection, in full or in part: from then on the provider
// may have acted on it.
//
// Request-Sent-At tells the provider when the request left, and
// Request-Max-Age the bound this client waits out (Config.MaxRequestAge),
// so it refuses one that arrives later than that: set before the
// connection is made, Request-Sent-At makes a request look older than it
// is, never younger.
//
// GetBody is cleared on purpose. net/http silently resends a request that
// failed on a reused keep-alive connection when it considers the request
// replayable, and a POST carrying an Idempotency-Key header with a
// rewindable body is considered replayable. That resend would be a retry
// inside the adapter, hidden from the use case.
func newRequest(ctx context.Context, target, key string, body []byte, maxAge time.Duration, sent *atomic.Bool) (*http.Request, error) {
	trace := &httptrace.ClientTrace{
		WroteHeaders: func() { sent.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) },
	}
	r, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.GetBody = nil
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Request-Sent-At", time.Now().UTC().Format(time.RFC3339Nano))
	if maxAge > 0 {
		r.Header.Set("Request-Max-Age", strconv.FormatInt(maxAge.Milliseconds(), 10))
	}
	return r, nil
}

// decision reads a 200 answer. An answer that cannot be read, or that
// describes another charge (refund, ...) than the one asked for, is not a
// decision.
func decision(op operation, want answer, body []byte) (app.ProviderDecision, error) {
	a, err := describing(op, want, body)
	if err != nil {
		return "", err
	}
	return decisionOf(op, a)
}

// describing reads an answer that must describe the request want stands
// for.
func describing(op operation, want answer, body []byte) (answer, error) {
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return answer{}, fmt.Errorf("%w: unreadable answer: %w", app.ErrProviderOutcomeUnknown, err)
	}
	describes := op.describes
	if describes == nil {
		describes = sameRequest
	}
	if !describes(a, want) {
		return answer{}, fmt.Errorf("%w: the answer describes another %s (key %q, reference %q, %s %s, charge %q, authorization %q)",
			app.ErrProviderOutcomeUnknown, op.noun, a.IdempotencyKey, a.Reference, a.Amount, a.Currency, a.Charge, a.Authorization)
	}
	return a, nil
}

// The statuses of the sandbox's received mode: a modification received
// and not decided yet, and one that failed once decided.
const (
	statusReceived = "received"
	statusFailed   = "failed"
)

// decisionOf is the decision a charge's (or refund's) status states. A
// modification's lookup that answers "received" knows no decision yet:
// unknown, as anything else that is not one.
func decisionOf(op operation, a answer) (app.ProviderDecision, error) {
	switch {
	case a.Status == "succeeded":
		return app.ProviderApproved, nil
	case a.Status == "declined":
		return app.ProviderDeclined, nil
	case a.Status == statusFailed && op.modification:
		return app.ProviderFailed, nil
	default:
		return "", fmt.Errorf("%w: %s %s has status %q", app.ErrProviderOutcomeUnknown, op.noun, a.ID, a.Status)
	}
}

// classifyRefusal sorts a non-200 answer.
//
//   - 400, 422: the provider refused to process the request as it is;
//     nothing was charged, and asking again gets the same answer: refused
//     for good. 422 idempotency_key_reused cannot happen through this
//     service, which sends one provider key with one set of parameters
//     only (the payment row's unique constraint, and a row is never
//     deleted after an unknown outcome).
//   - 401, 403, 404, 429: refused before processing, for a reason on our
//     side or of the moment (credentials, the URL, a rate limit) that an
//     operator or time fixes: not charged, for now. A wrong API key must
//     not end every payment FAILED.
//   - 5xx with "charged": false ("refunded", "authorized", "captured",
//     "voided": false for the other kinds): the provider says it did not
//     charge (refund, ...).
//   - everything else, 409 in progress and other 5xx among them: unknown.
func classifyRefusal(op operation, status int, body []byte) error {
	var e errorAnswer
	_ = json.Unmarshal(body, &e) // a gateway's HTML page is simply not an errorAnswer
	what := fmt.Sprintf("provider answered %d %s", status, e.Error.Type)
	switch {
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity:
		return fmt.Errorf("%w: %s: %s", app.ErrProviderRefused, what, e.Error.Message)
	case status == http.StatusUnauthorized, status == http.StatusForbidden,
		status == http.StatusNotFound, status == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s: %s", app.ErrProviderNotCharged, what, e.Error.Message)
	case status >= 500 && op.nothingDone(e) != nil && !*op.nothingDone(e):
		return fmt.Errorf("%w: %s: %s", app.ErrProviderNotCharged, what, e.Error.Message)
	default:
		return fmt.Errorf("%w: %s", app.ErrProviderOutcomeUnknown, what)
	}
}

// LookupCharge implements app.ChargeProvider: GET /v1/charges?idempotency_key=,
// which charges nothing and so may be asked any number of times. 404 is
// the provider's word that it holds no charge under the key; anything but
// that and a readable 200 (409 while the key's request is being processed
// among them) cannot say, and is unknown.
func (c *Client) LookupCharge(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return c.lookup(ctx, c.charges, req.IdempotencyKey)
}

// LookupRefund implements app.RefundProvider: GET /v1/refunds?idempotency_key=,
// sorted as LookupCharge sorts a charge's.
func (c *Client) LookupRefund(ctx context.Context, req app.ProviderRefund) (app.ProviderDecision, error) {
	return c.lookup(ctx, c.refunds, req.IdempotencyKey)
}

// LookupAuthorization implements app.AuthorizationProvider: GET
// /v1/authorizations?idempotency_key=, sorted as LookupCharge sorts a
// charge's.
func (c *Client) LookupAuthorization(ctx context.Context, req app.ProviderCharge) (app.ProviderDecision, error) {
	return c.lookup(ctx, c.authorizations, req.IdempotencyKey)
}

// LookupCapture implements app.CaptureProvider: GET
// /v1/captures?idempotency_key=, sorted as LookupCharge sorts a charge's.
func (c *Client) LookupCapture(ctx context.Context, req app.ProviderCapture) (app.ProviderDecision, error) {
	return c.lookup(ctx, c.captures, req.IdempotencyKey)
}

// LookupVoid implements app.VoidProvider: GET /v1/voids?idempotency_key=,
// sorted as LookupCharge sorts a charge's.
func (c *Client) LookupVoid(ctx context.Context, req app.ProviderVoid) (app.ProviderDecision, error) {
	return c.lookup(ctx, c.voids, req.IdempotencyKey)
}

// Hold implements app.AuthorizationProvider with the lookup of the
// authorization, whose "hold" says where it stands (the provider notices a
// lapse before it answers). ErrNoProviderCharge is the provider's own
// "no authorization under the key"; a declined authorization holds
// nothing, which no HoldStatus says, so it is an error that wraps none of
// the ports' (unknown to the outcome model, as anything else that is not
// a readable hold).
func (c *Client) Hold(ctx context.Context, req app.ProviderCharge) (app.HoldStatus, error) {
	a, err := c.get(ctx, c.authorizations, req.IdempotencyKey)
	if err != nil {
		return "", err
	}
	switch a.Status {
	case "succeeded":
	case "declined":
		return "", fmt.Errorf("the authorization %s was declined: it holds nothing", a.ID)
	default:
		return "", fmt.Errorf("%w: authorization %s has status %q", app.ErrProviderOutcomeUnknown, a.ID, a.Status)
	}
	switch h := app.HoldStatus(a.Hold); h {
	case app.HoldActive, app.HoldCaptured, app.HoldVoided, app.HoldExpired:
		return h, nil
	default:
		return "", fmt.Errorf("%w: authorization %s has hold %q", app.ErrProviderOutcomeUnknown, a.ID, a.Hold)
	}
}

// lookup asks op's lookup what the provider holds under a key.
func (c *Client) lookup(ctx context.Context, op operation, idempotencyKey string) (app.ProviderDecision, error) {
	a, err := c.get(ctx, op, idempotencyKey)
	if err != nil {
		return "", err
	}
	return decisionOf(op, a)
}

// get reads op's lookup of a key: the key's answer, or an error of the
// ports' (ErrNoProviderCharge, ErrProviderOutcomeUnknown).
func (c *Client) get(ctx context.Context, op operation, idempotencyKey string) (answer, error) {
	u := *op.url
	u.RawQuery = url.Values{"idempotency_key": {idempotencyKey}}.Encode()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return answer{}, fmt.Errorf("%w: build lookup: %w", app.ErrProviderOutcomeUnknown, err)
	}
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return answer{}, fmt.Errorf("%w: lookup: %w", app.ErrProviderOutcomeUnknown, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return answer{}, fmt.Errorf("%w: reading the lookup (%s): %w", app.ErrProviderOutcomeUnknown, resp.Status, err)
	}
	var e errorAnswer
	switch {
	case resp.StatusCode == http.StatusOK:
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			return answer{}, fmt.Errorf("%w: the lookup's answer is not the key's %s: %w", app.ErrProviderOutcomeUnknown, op.noun, err)
		}
		if a.IdempotencyKey != idempotencyKey {
			return answer{}, fmt.Errorf("%w: the lookup's answer is not the key's %s (it names key %q)", app.ErrProviderOutcomeUnknown, op.noun, a.IdempotencyKey)
		}
		return a, nil
	case resp.StatusCode == http.StatusNotFound && json.Unmarshal(body, &e) == nil && e.Error.Type == op.notFound:
		// Only the provider's own "none under the key": a 404 from anything
		// in front of it (a wrong path, a proxy) says nothing about the key.
		return answer{}, fmt.Errorf("%w: %s", app.ErrNoProviderCharge, e.Error.Message)
	default:
		return answer{}, fmt.Errorf("%w: lookup answered %s", app.ErrProviderOutcomeUnknown, resp.Status)
	}
}

var (
	_ app.ChargeProvider        = (*Client)(nil)
	_ app.RefundProvider        = (*Client)(nil)
	_ app.AuthorizationProvider = (*Client)(nil)
	_ app.CaptureProvider       = (*Client)(nil)
	_ app.VoidProvider          = (*Client)(nil)
)
