// Package stripe is the adapter for Stripe's API, on stripe-go: it
// implements app.ChargeProvider, app.AuthorizationProvider,
// app.CaptureProvider, app.VoidProvider and app.RefundProvider, and sorts
// every answer Stripe can give into the ports' cases (outcome.go's
// errors), as the sandbox adapter does for its provider.
//
// A charge is a PaymentIntent created with confirm=true (an authorization
// the same with capture_method=manual); a capture and a void are the
// capture and cancel of that PaymentIntent, and a refund is a Refund of
// it. The PaymentIntent's metadata holds our provider key (provider_key)
// and the external payment id; the key is also the request's
// Idempotency-Key (hashed when longer than Stripe's 255 characters: the
// same on every retry).
//
// It sends exactly one POST per call and never retries: stripe-go's own
// retries are off (MaxNetworkRetries 0), and its HTTP client clears each
// request's GetBody, which stripe-go sets and net/http would otherwise use
// to send a POST again by itself on a reused keep-alive connection whose
// answer was lost (noResend). Whether a request that failed was written
// at all tells "nothing done" from "unknown" (httptrace).
//
// What Stripe can prove (decision 0035): its List API is strongly
// consistent, so a lookup lists the PaymentIntents created since the
// payment was reserved and finds ours by its metadata; but Stripe acts on
// a request however late it arrives, so finding nothing proves nothing
// (app.LookupByListing, no request bound). Its Search API is eventually
// consistent and never a proof: it only finds the PaymentIntent a capture,
// void or refund must name by id when the listing around the reservation
// does not.
package stripe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider"
)

// Name is the provider name clients send as paymentProvider.
const Name domain.ProviderName = "stripe"

// DefaultAPIBase is Stripe's own API, without /v1.
const DefaultAPIBase = "https://api.stripe.com"

// MaxKeyLength is the longest Idempotency-Key Stripe takes.
const MaxKeyLength = 255

// maxMetadataValue is the longest metadata value Stripe keeps.
const maxMetadataValue = 500

// keyLifetime is how long Stripe keeps an idempotency key's answer (24 h),
// less a margin for the clocks: a create sent later under the same key
// would be a new request to Stripe, and could charge again.
const keyLifetime = 23 * time.Hour

// Metadata names the adapter writes and reads.
const (
	metaProviderKey = "provider_key"
	metaExternalID  = "external_payment_id"
	metaCaptureKey  = "capture_key"
)

// Config locates Stripe and bounds each call.
type Config struct {
	// SecretKey is the API key (sk_...).
	SecretKey string
	// APIBase is the API's base URL without /v1 (STRIPE_API_BASE);
	// DefaultAPIBase when empty.
	APIBase string
	// ConnectTimeout bounds establishing a connection; a call that could
	// not connect sent nothing.
	ConnectTimeout time.Duration
	// Timeout bounds one call, every request it makes and their answers
	// included; shorter than the idempotency lock (internal/config checks
	// it).
	Timeout time.Duration
	// LookupSkew is how long before the payment's reservation a listing
	// starts: the margin for our clock against Stripe's. Default 5 min.
	LookupSkew time.Duration
	// NearWindow is how long after the reservation a modification looks
	// for its PaymentIntent by listing before it searches: the first
	// attempt's request lands within it. Default 15 min.
	NearWindow time.Duration
	// MaxLookupPages bounds the pages of 100 one listing reads; past it the
	// lookup is unknown. Default 10.
	MaxLookupPages int
	// Now is the adapter's clock; time.Now when nil.
	Now func() time.Time
}

// Client is Stripe's API as the ports ask for it.
type Client struct {
	api *stripego.Client
	// backend is the API's backend, for the create's own form (calls.go).
	backend stripego.Backend
	http    *http.Client
	cfg     Config
}

// New returns a client with one connection pool for every call.
func New(cfg Config) (*Client, error) {
	if cfg.APIBase == "" {
		cfg.APIBase = DefaultAPIBase
	}
	if cfg.SecretKey == "" {
		return nil, fmt.Errorf("stripe: a secret key is required")
	}
	if !strings.HasPrefix(cfg.APIBase, "http://") && !strings.HasPrefix(cfg.APIBase, "https://") || strings.HasSuffix(strings.TrimRight(cfg.APIBase, "/"), "/v1") {
		return nil, fmt.Errorf("stripe: API base %q must be http(s)://host[:port], without /v1", cfg.APIBase)
	}
	if cfg.LookupSkew == 0 {
		cfg.LookupSkew = 5 * time.Minute
	}
	if cfg.NearWindow == 0 {
		cfg.NearWindow = 15 * time.Minute
	}
	if cfg.MaxLookupPages == 0 {
		cfg.MaxLookupPages = 10
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	transport := provider.NewTransport(cfg.ConnectTimeout)
	// No Timeout: every call runs under its own deadline (bound), and a
	// client's Timeout costs each request a timer and a goroutine besides.
	hc := &http.Client{
		Transport: noResend{transport},
		// A redirect would be a second request; Stripe never sends one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	base := strings.TrimRight(cfg.APIBase, "/")
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		HTTPClient: hc,
		URL:        &base,
		// The core decides every retry; the SDK makes none.
		MaxNetworkRetries: stripego.Int64(0),
		EnableTelemetry:   stripego.Bool(false),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	api := stripego.NewClient(cfg.SecretKey, stripego.WithBackends(&stripego.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}))
	return &Client{api: api, backend: backend, http: hc, cfg: cfg}, nil
}

// bound is ctx bounded by Config.Timeout: a call that makes more than one
// request (a capture finds its PaymentIntent first) still ends within the
// call's bound, before the idempotency lock does.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.cfg.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.Timeout)
}

// noResend sends each request once. stripe-go sets Request.GetBody, and
// net/http's transport sends a request with a body again by itself when a
// reused keep-alive connection breaks, if it has GetBody and an
// Idempotency-Key header: a second POST under one key, its answer returned
// as if nothing had happened, a retry hidden from the core. A clone
// without GetBody is not replayable, so the transport does not.
//
// The clone's body is the request's, read whole (a form of a few hundred
// bytes) and given its length: stripe-go hands net/http a body of unknown
// length, which the transport probes for a first byte (a goroutine and a
// timer a request) and then sends chunked, in more writes, a good share of
// what a charge cost the service (BenchmarkCharge).
type noResend struct{ next http.RoundTripper }

func (t noResend) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		if cerr := r.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// Nothing was written: the call sorts it as not sent.
			return nil, fmt.Errorf("stripe: read the request's body: %w", err)
		}
		r = r.Clone(r.Context())
		r.Body, r.GetBody, r.ContentLength = io.NopCloser(bytes.NewReader(body)), nil, int64(len(body))
	}
	resp, err := t.next.RoundTrip(r)
	noteStatus(r, resp)
	return resp, err
}

// Abilities: Stripe lists its records (the PaymentIntents, strongly
// consistent, our key in their metadata) but acts on a request however
// late it arrives, answers a capture, refund or void at once, takes keys
// of at most 255 characters, and counts in minor units.
func (c *Client) Abilities() app.ProviderAbilities {
	return app.ProviderAbilities{Lookup: app.LookupByListing, RequestBound: 0, Modifications: app.AnswersAtOnce,
		MaxKeyLength: MaxKeyLength, MinorUnits: true}
}

// IdempotencyKey is the Idempotency-Key a provider key is sent under: the
// key itself, or, when longer than Stripe takes, "sha256:" and its
// SHA-256 in hex, the same on every retry.
func IdempotencyKey(providerKey string) string {
	if len(providerKey) <= MaxKeyLength {
		return providerKey
	}
	sum := sha256.Sum256([]byte(providerKey))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// minorUnits is m as Stripe takes it: the amount in its currency's minor
// units and the currency in lower case; ErrProviderRefused when the amount
// cannot be written so (the use case refuses it before, at validation:
// this is the last line).
func minorUnits(m domain.Money) (int64, string, error) {
	units, ok := m.InMinorUnits()
	if !ok {
		return 0, "", fmt.Errorf("%w: %s %s cannot be written in the currency's minor units; nothing was sent",
			app.ErrProviderRefused, m.AmountString(), m.Currency())
	}
	return units, strings.ToLower(string(m.Currency())), nil
}

// metadataValue is a provider key as the metadata keeps it; refused when
// Stripe's metadata cannot hold it whole (no key of this service is that
// long).
func metadataValue(key string) (string, error) {
	if len(key) > maxMetadataValue {
		return "", fmt.Errorf("%w: the provider key is longer than Stripe's metadata holds (%d > %d); nothing was sent",
			app.ErrProviderRefused, len(key), maxMetadataValue)
	}
	return key, nil
}

// post is the context and the Params of one POST under key: the context
// traced, so that sent says whether the request was written (stripe-go
// sends each call with the context it is given, whatever its Params say).
func post(ctx context.Context, key string, sent *sentFlag) (context.Context, stripego.Params) {
	ctx = sent.trace(ctx)
	return ctx, stripego.Params{Context: ctx, IdempotencyKey: stripego.String(IdempotencyKey(key))}
}

var (
	_ app.ChargeProvider        = (*Client)(nil)
	_ app.AuthorizationProvider = (*Client)(nil)
	_ app.CaptureProvider       = (*Client)(nil)
	_ app.VoidProvider          = (*Client)(nil)
	_ app.RefundProvider        = (*Client)(nil)
)
