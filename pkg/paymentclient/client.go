// Package paymentclient is the reference Go client of payment-service, for
// teams that charge and refund through it: Charge (POST /payments), Refund
// (POST /payments/{id}/refunds) and Refunds (GET /payments/{id}/refunds),
// and two-step payments: Authorize (POST /payments with captureMethod
// manual), Capture (POST /payments/{id}/captures) and Void (POST
// /payments/{id}/voids).
// It follows rule R-DIST-IDEM-X3 of the idempotency style guide: one
// Idempotency-Key per business operation, reused on every retry, and
// retries only where a retry cannot charge or refund twice. Every command
// (Charge, Refund, Capture, Void) shares one retry loop and one reading of
// the service's problems.
//
// The rules it keeps, and why:
//
//   - The key belongs to the business operation, not to the HTTP request.
//     Make it once, when you decide to charge (NewIdempotencyKey), store it
//     with the order or payment intent it charges, and pass the same key
//     and the same ChargeRequest on every call for that operation, also
//     after your own process restarts. A new key for a retry turns the
//     service's first layer of protection off; a new externalPaymentId
//     turns off the second. The service's third layer (one paid order is
//     paid once) still refuses the second charge, but only for the same
//     order.
//   - The same holds for a refund: one key per refund, stored with it,
//     and the same RefundRequest (its externalRefundId included) on every
//     call for it; and for a capture (its externalCaptureId included) and
//     a void.
//   - Every command retries by itself only what is safe and may still
//     succeed, the same answers for all, as the service documents them
//     (Capture and Void add 409 payment-transition-in-progress): no
//     answer at all (the request may or may not have been processed), 503 (the database or the provider is unavailable, or
//     the outcome is unknown: the money may have moved, and the retry with
//     the same key asks again), 409 request-in-progress (another attempt
//     with this key is running), and a gateway's answer: 502 or 504, or a
//     500 or 503 that is not the service's own problem+json. A load
//     balancer or proxy says with those that it has no answer from the
//     service, which may have moved the money; to this client they are no
//     answer at all. Every other 4xx, and the service's own 500, is final
//     for this request and is returned as an error at once; so is 409
//     refund-exceeds-payment, although the same call may succeed later if
//     a refund in progress is declined: that is the caller's decision.
//   - Between attempts it waits what the service's Retry-After says, plus
//     a random tenth of it so that clients told the same time do not come
//     back together: the service says a second while another attempt may
//     answer any moment, and the time until a retry can take the claim
//     over otherwise. Without a Retry-After (no answer at all) it waits a
//     capped exponential backoff with jitter. It stops when the caller's
//     context ends, or after RetryPolicy.MaxAttempts.
//   - Errors are typed: use errors.Is with the Err* values (ErrDeclined,
//     ErrKeyReused, ErrOrderAlreadyPaid, ErrRefundExceedsPayment,
//     ErrPaymentNotAuthorized, ErrCaptureDeclined, ...)
//     and errors.As with *Problem,
//     *DeclinedError or *GaveUpError for the details.
//
// A *GaveUpError whose OutcomeUnknown is true (errors.Is(err,
// ErrOutcomeUnknown)) means the command may have been made: call it again
// later with the same key and request to learn how it ended. Never start
// over with a new key or a new external payment, refund or capture id.
package paymentclient

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the service's address, such as https://payments.internal.
	BaseURL string
	// APIKey is the client's key, sent as a bearer token.
	APIKey string
	// HTTPClient makes the requests; nil means a client of its own with
	// keep-alive connections. Its Timeout, if any, bounds each attempt.
	HTTPClient *http.Client
	// AttemptTimeout bounds one attempt, answer included; zero means 15 s.
	// An attempt that times out is retried like any request that got no
	// answer.
	AttemptTimeout time.Duration
	// Retry is the retry policy; its zero value is DefaultRetryPolicy.
	Retry RetryPolicy
}

// RetryPolicy says how often and how fast the client's calls retry.
type RetryPolicy struct {
	// InitialBackoff is the pause after the first failed attempt; it
	// doubles with each attempt up to MaxBackoff. Zero means 100 ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the backoff. A Retry-After, longer or shorter, is
	// followed instead. Zero means 5 s.
	MaxBackoff time.Duration
	// MaxAttempts bounds the attempts; zero means no bound but the
	// caller's context, which should then have a deadline.
	MaxAttempts int
}

// DefaultRetryPolicy is the policy of a zero RetryPolicy.
var DefaultRetryPolicy = RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}

// Client charges, refunds, captures and voids through payment-service. It
// is safe for concurrent use.
type Client struct {
	paymentsURL string
	apiKey      string
	http        *http.Client
	attempt     time.Duration
	retry       RetryPolicy
	// sleep waits d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// jitter returns a random duration in [0, d); tests replace it.
	jitter func(d time.Duration) time.Duration
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("paymentclient: BaseURL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	if cfg.APIKey == "" {
		return nil, errors.New("paymentclient: APIKey is required")
	}
	c := &Client{
		paymentsURL: u.JoinPath("payments").String(),
		apiKey:      cfg.APIKey,
		http:        cfg.HTTPClient,
		attempt:     cfg.AttemptTimeout,
		retry:       cfg.Retry,
		sleep:       sleep,
		jitter:      func(d time.Duration) time.Duration { return rand.N(d) },
	}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
	}
	if c.attempt <= 0 {
		c.attempt = 15 * time.Second
	}
	if c.retry.InitialBackoff <= 0 {
		c.retry.InitialBackoff = DefaultRetryPolicy.InitialBackoff
	}
	if c.retry.MaxBackoff <= 0 {
		c.retry.MaxBackoff = DefaultRetryPolicy.MaxBackoff
	}
	c.retry.MaxBackoff = max(c.retry.MaxBackoff, c.retry.InitialBackoff)
	return c, nil
}

// NewIdempotencyKey returns a new random key (a UUID v4) for one business
// operation. Store it with the operation before the first attempt, so that
// every retry, also from another process, sends the same key.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ChargeRequest is the body of POST /payments.
type ChargeRequest struct {
	// OrderID is the order to pay; the service checks it against the
	// order as it knows it.
	OrderID int64 `json:"orderId"`
	// CustomerID is the order's customer.
	CustomerID int64 `json:"customerId"`
	// Amount is a decimal string, such as "100.50": never a float.
	Amount string `json:"amount"`
	// Currency is the ISO 4217 code, such as "RUB".
	Currency string `json:"currency"`
	// PaymentProvider names the provider, such as "sandbox".
	PaymentProvider string `json:"paymentProvider"`
	// ExternalPaymentID is the provider's payment (intent) id. Like the
	// idempotency key, it belongs to the operation: reuse it on retries.
	ExternalPaymentID string `json:"externalPaymentId"`
	// CaptureMethod is empty (or "automatic") to charge at once, and
	// CaptureManual to authorize (Authorize sets it).
	CaptureMethod string `json:"captureMethod,omitempty"`
	// PaymentMethod is what a charge through Stripe pays with, Stripe's
	// PaymentMethod id (pm_...); empty for the sandbox, and then not sent.
	// It is part of the command: reuse it on retries.
	PaymentMethod string `json:"paymentMethod,omitempty"`
}

// Payment is a payment as the service records it.
// Its fields are the request's, plus what the service assigned.
type Payment struct {
	// ID is the service's payment id (GET /payments/{id}).
	ID                int64  `json:"id"`
	OrderID           int64  `json:"orderId"`
	CustomerID        int64  `json:"customerId"`
	Amount            string `json:"amount"`
	Currency          string `json:"currency"`
	PaymentProvider   string `json:"paymentProvider"`
	ExternalPaymentID string `json:"externalPaymentId"`
	// Status is SUCCEEDED, DECLINED or FAILED; a two-step payment is
	// AUTHORIZED until captured (SUCCEEDED), voided (VOIDED) or lapsed
	// (EXPIRED).
	Status string `json:"status"`
	// CreatedAt is when the payment was reserved.
	CreatedAt time.Time `json:"createdAt"`
	// CaptureMethod is CaptureManual for a two-step payment, else empty.
	CaptureMethod string `json:"captureMethod,omitempty"`
	// CapturedAmount is what the capture took, once a two-step payment is
	// captured; refunds are of it only.
	CapturedAmount string `json:"capturedAmount,omitempty"`
}

// Result is a successful charge, authorization, capture or void: the
// payment as it stands after it.
type Result struct {
	Payment Payment
	// Created is true for 201 (this operation made the payment) and false
	// for 200 (the external payment was already recorded as this very
	// charge, under another key).
	Created bool
	// Replayed is true when the answer is the one stored for the key by an
	// earlier attempt (the Idempotent-Replayed header).
	Replayed bool
	// Attempts is how many requests it took.
	Attempts int
}

// Charge charges req as the business operation named by key, retrying what
// is safe to retry (see the package documentation) until a final answer,
// the end of ctx, or RetryPolicy.MaxAttempts.
//
// It returns the payment, or an error to switch on with errors.Is:
// ErrDeclined (also a *DeclinedError, with the declined payment),
// ErrPaymentFailed (a *Problem with the failed payment), ErrKeyReused,
// ErrOrderAlreadyPaid, ErrExternalPaymentConflict,
// ErrValidation, ErrUnauthorized, ErrOrderNotFound, ErrOrderMismatch (each
// also a *Problem), or a *GaveUpError when it stopped retrying; that one
// Is ErrOutcomeUnknown when the charge may have been made, and wraps the
// context's error when the context ended.
func (c *Client) Charge(ctx context.Context, key string, req ChargeRequest) (Result, error) {
	var res Result
	a, err := c.command(ctx, key, c.paymentsURL, req, &res.Payment)
	if err != nil {
		return Result{}, err
	}
	res.Created, res.Replayed, res.Attempts = a.created, a.replayed, a.attempts
	return res, nil
}

// attempt is one HTTP request of an operation; every retry sends the same.
type attempt struct {
	method string
	url    string
	// key is the operation's Idempotency-Key; empty for a read.
	key  string
	body []byte
	// movesMoney is true for a command: an attempt that got no answer may
	// have moved the money, so giving up is ErrOutcomeUnknown.
	movesMoney bool
}

// answered is a final success: the status, and what the service said of it.
type answered struct {
	created  bool // 201: this operation made it
	replayed bool // the stored answer of an earlier attempt
	attempts int
}

// command runs one money-moving operation: POST body (encoded as JSON) to
// url under key, retried by do, its success decoded into out.
func (c *Client) command(ctx context.Context, key, url string, body, out any) (answered, error) {
	if key == "" {
		return answered{}, errors.New("paymentclient: an idempotency key is required (NewIdempotencyKey, stored with the operation)")
	}
	b, err := json.Marshal(body)
	if err != nil {
		return answered{}, fmt.Errorf("paymentclient: encode request: %w", err)
	}
	return c.do(ctx, attempt{method: http.MethodPost, url: url, key: key, body: b, movesMoney: true}, out)
}

// do makes the attempt until a final answer, the end of ctx, or
// RetryPolicy.MaxAttempts, retrying only what retryable allows (the package
// documentation says why), and decodes a success into out. Every operation
// of the client goes through it: the retry discipline is written once.
func (c *Client) do(ctx context.Context, a attempt, out any) (answered, error) {
	giveUp := &GaveUpError{}
	for n := 1; ; n++ {
		res, retryAfter, err := c.once(ctx, a, out)
		giveUp.Attempts, giveUp.Last = n, err
		if err == nil {
			res.attempts = n
			return res, nil
		}
		if !retryable(err) {
			return answered{}, err
		}
		if a.movesMoney && mayHaveMovedMoney(err) {
			giveUp.OutcomeUnknown = true
		}
		if ctx.Err() != nil {
			giveUp.Err = ctx.Err()
			return answered{}, giveUp
		}
		if c.retry.MaxAttempts > 0 && n >= c.retry.MaxAttempts {
			return answered{}, giveUp
		}
		wait := c.backoff(n)
		if retryAfter > 0 {
			wait = retryAfter + c.jitter(retryAfter/10+1)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			// The next attempt could not start before the caller's
			// deadline: give up now rather than sleep into it.
			giveUp.Err = context.DeadlineExceeded
			return answered{}, giveUp
		}
		if err := c.sleep(ctx, wait); err != nil {
			giveUp.Err = err
			return answered{}, giveUp
		}
	}
}

// backoff is the pause after attempt n (1-based): half of the capped
// exponential step, plus a random part of up to the other half, so that
// clients that failed together do not retry together.
func (c *Client) backoff(n int) time.Duration {
	d := c.retry.InitialBackoff
	for i := 1; i < n && d < c.retry.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.retry.MaxBackoff)
	return d/2 + c.jitter(d/2+1)
}

// once makes one attempt and decodes a 200 or 201 into out. It returns the
// Retry-After the service asked for (zero if none).
func (c *Client) once(ctx context.Context, a attempt, out any) (answered, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.attempt)
	defer cancel()
	var body io.Reader
	if a.body != nil {
		body = bytes.NewReader(a.body)
	}
	httpReq, err := http.NewRequestWithContext(ctx, a.method, a.url, body)
	if err != nil {
		return answered{}, 0, fmt.Errorf("paymentclient: %w", err)
	}
	// One call is one attempt: net/http would otherwise resend a request
	// with an Idempotency-Key by itself when a kept-alive connection
	// breaks, unseen by this loop and its backoff.
	httpReq.GetBody = nil
	httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
	if a.body != nil {
		httpReq.Header.Set("Content-Type", "application/json")
	}
	if a.key != "" {
		httpReq.Header.Set("Idempotency-Key", a.key)
	}
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return answered{}, 0, &NoAnswerError{Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answered{}, 0, &NoAnswerError{Err: err}
	}
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated:
		if err := json.Unmarshal(b, out); err != nil {
			// The operation went through but its answer is garbled on
			// the way: ask again, the service replays it.
			return answered{}, 0, &NoAnswerError{Err: fmt.Errorf("unreadable %d answer: %w", resp.StatusCode, err)}
		}
		return answered{created: resp.StatusCode == http.StatusCreated,
			replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, 0, nil
	}
	return answered{}, retryAfter, decodeProblem(resp.StatusCode, retryAfter, b)
}

// decodeProblem reads an error answer: the service's problem+json, or a
// gateway's page in its place.
func decodeProblem(status int, retryAfter time.Duration, b []byte) error {
	p := &Problem{Status: status, RetryAfter: retryAfter}
	if err := json.Unmarshal(b, p); err != nil || p.Code == "" {
		// Not the service's problem+json: a proxy's or gateway's page.
		p.Code, p.Title = gatewayCodePrefix+strconv.Itoa(status), http.StatusText(status)
		p.Detail = strings.TrimSpace(string(b[:min(len(b), 200)]))
	}
	p.Status = status // the answer's, whatever a body's JSON said
	if p.Code == codeDeclined && p.Payment != nil {
		return &DeclinedError{Payment: *p.Payment, Problem: p}
	}
	return p
}

// parseRetryAfter reads delay-seconds; an HTTP date or garbage is ignored.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
