// Package stripefake is a stateful stand-in for the part of Stripe's API
// the service's Stripe adapter (internal/provider/stripe) uses, over real
// HTTP, with Stripe's documented semantics where they decide what the
// service may conclude. stripe-mock (Stripe's own mock) checks the shapes
// of requests and answers but keeps no state: it cannot show a replay, a
// 409 for a key in use, a capture that releases the rest, or a search that
// has not caught up. This fake can, and its answers are checked against
// the OpenAPI document stripe-mock embeds (stripefake_test.go), so it
// cannot drift from Stripe's shapes. It is a test and development tool,
// not part of the service.
//
// # What it keeps
//
// PaymentIntents (create with confirm, capture, cancel, retrieve, list,
// search) and Refunds (create, retrieve, list), in memory, amounts in minor
// units as Stripe counts them, currencies in lower case.
//
// # Idempotency, as Stripe documents it
//
//   - A POST's Idempotency-Key is at most 255 characters (longer: 400).
//   - Authentication (401), rate limits (429) and parameter validation
//     (400) are decided before the idempotency layer, and never saved.
//   - Once an endpoint starts executing, its answer is saved under the key
//     for 24 hours, whatever it is, a 500 included, and a request with the
//     same key and the same parameters gets it again (Idempotent-Replayed:
//     true), executing nothing.
//   - The same key with other parameters, or on another endpoint, is 400
//     idempotency_error: nothing is executed.
//   - A request whose key's first request is still executing gets 409
//     idempotency_key_in_use.
//
// # Behaviours
//
// The payment method picks what a confirmed PaymentIntent does:
//
//	pm_card_chargeDeclined          402 card_error card_declined (the PaymentIntent is made, requires_payment_method)
//	pm_card_threeDSecureRequired    requires_action (3-D Secure asked for)
//	pm_fake_processing              processing, until SettlePaymentIntent
//	pm_fake_lostAnswer              approved, the answer of the request that made it lost (FaultDrop)
//	any other pm_card_...           approved: succeeded, or requires_capture with capture_method manual
//	anything else                   400 resource_missing
//
// and faults, queued per Idempotency-Key (FailNext), hit the requests under
// that key in order: drop the connection after executing, save and answer a
// 500 (after executing, or without), answer slowly, answer 502 as a gateway
// would, rate-limit, refuse the request as invalid (400, before the
// idempotency layer), stay in flight for a while before executing (so that a
// second request meets 409), stay in flight until the test releases the
// key (FaultHold, Release: a request Stripe acts on after its sender gave
// up), or make a refund pending.
//
// # Its books
//
// Ledger is everything it holds (every PaymentIntent and refund, and the
// POSTs executed under each key): what a test that checks the service
// against Stripe's books reads, as the fault suite does.
//
// # Search and List
//
// List is strongly consistent, filtered by created and paged with
// starting_after, newest first, as Stripe's is. Search supports
// metadata['name']:'value' and sees an object only Config.SearchLag after
// it was made, as Stripe's search index does (under a minute normally, up
// to an hour in an outage): a miss there is not a proof.
//
// # Events
//
// Every change makes an event (payment_intent.succeeded,
// .amount_capturable_updated, .payment_failed, .canceled, .processing,
// .requires_action, refund.created, refund.updated, charge.refund.updated,
// charge.refunded), kept in Events and, with a webhook URL, POSTed to it
// at least once, signed as Stripe signs them (Stripe-Signature:
// t=<unix>,v1=<hex HMAC-SHA256 of "t.payload">), retried on anything but a
// 2xx.
package stripefake

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// Config tunes a fake. The zero value takes any secret key, answers at
// once, indexes for search at once and sends no webhooks.
type Config struct {
	// SecretKey, when set, is the one API key taken (Authorization:
	// Bearer ...); any other is 401.
	SecretKey string
	// WebhookURL, when set, receives every event; SetWebhookURL sets it
	// later.
	WebhookURL string
	// WebhookSecret signs the events (whsec_...).
	WebhookSecret string
	// APIVersion is the events' api_version; default stripe-go's pinned
	// version (stripe.APIVersion).
	APIVersion string
	// SearchLag is how long after it was made an object shows in search.
	SearchLag time.Duration
	// SlowDelay is how late FaultSlow answers and how long FaultBusy keeps
	// a key in flight; default 3 s.
	SlowDelay time.Duration
	// Latency is how long executing a POST takes (its key in flight
	// meanwhile, so a request with the same key gets 409), as the sandbox
	// provider's Latency is for a new charge; GETs and replays answer at
	// once.
	Latency time.Duration
	// Now is the fake's clock; default time.Now. Tests move it to expire
	// saved answers (24 h).
	Now func() time.Time
	// WebhookRetryFor bounds how long an event is delivered again; default
	// 30 s.
	WebhookRetryFor time.Duration
	// FeeBasisPoints and FeeFixed (minor units) are the fee a charge's
	// balance transaction shows (balance.go); none by default.
	FeeBasisPoints, FeeFixed int64
}

// Fault is a way a request goes wrong.
type Fault string

const (
	// FaultDrop executes the request, saves its answer, and closes the
	// connection without one.
	FaultDrop Fault = "drop"
	// Fault500 executes the request, then saves and answers a 500: Stripe
	// replays it for 24 hours.
	Fault500 Fault = "500"
	// Fault500Nothing saves and answers a 500 without executing anything.
	Fault500Nothing Fault = "500_nothing"
	// FaultSlow executes the request and answers after SlowDelay.
	FaultSlow Fault = "slow"
	// FaultGateway502 executes the request, saves its answer, and answers
	// a gateway's 502 page instead.
	FaultGateway502 Fault = "gateway_502"
	// FaultRateLimit answers 429 before the idempotency layer.
	FaultRateLimit Fault = "rate_limit"
	// FaultInvalid answers 400 invalid_request_error before the
	// idempotency layer, as Stripe's validation does (a rule that changed,
	// a parameter it no longer takes): a refusal of this request only,
	// never saved, whatever an earlier request under the key did.
	FaultInvalid Fault = "invalid"
	// FaultBusy keeps the key in flight for SlowDelay before executing, so
	// a request with the same key meanwhile gets 409.
	FaultBusy Fault = "busy"
	// FaultRefundPending makes a refund pending until SettleRefund.
	FaultRefundPending Fault = "refund_pending"
	// FaultLookup500 answers a GET (a list, a search, a retrieve) with a
	// 500; queued under the key "GET".
	FaultLookup500 Fault = "lookup_500"
	// FaultHold keeps the key in flight, before executing, until the test
	// calls Release with the key (or the fake closes): a request that
	// Stripe acts on however late, after its sender gave up, while every
	// other request under the key meets 409 and every lookup finds
	// nothing.
	FaultHold Fault = "hold"
)

// LookupFaults is the FailNext key whose faults hit the next GETs.
const LookupFaults = "GET"

// Server is a running fake.
type Server struct {
	// URL is its base URL, such as http://127.0.0.1:41234, as
	// STRIPE_API_BASE takes it (without /v1).
	URL string

	cfg      Config
	srv      *http.Server
	listener net.Listener

	mu       sync.Mutex
	seq      int64
	intents  map[string]*paymentIntent
	refunds  map[string]*refund
	keys     map[string]*savedAnswer
	faults   map[string][]Fault
	requests []Request
	events   []Event
	webhooks *webhooks
	holds    map[string]chan struct{} // FaultHold's, by key; closed by Release
	closing  chan struct{}            // closed by Close: every hold ends
	closed   sync.Once
	balance  balance // the payouts (balance.go)
}

// Request is one request the fake received, for tests to count.
type Request struct {
	Method, Path, IdempotencyKey string
	// Replayed: answered from the key's saved answer.
	Replayed bool
	// Executed: it started executing (it changed state or may have).
	Executed bool
}

// New makes a fake that serves nothing until Start or Handler is used.
func New(cfg Config) *Server {
	if cfg.APIVersion == "" {
		cfg.APIVersion = stripe.APIVersion
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 3 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WebhookRetryFor == 0 {
		cfg.WebhookRetryFor = 30 * time.Second
	}
	s := &Server{cfg: cfg, intents: map[string]*paymentIntent{}, refunds: map[string]*refund{},
		keys: map[string]*savedAnswer{}, faults: map[string][]Fault{}, holds: map[string]chan struct{}{}, closing: make(chan struct{})}
	s.webhooks = newWebhooks(s, cfg.WebhookURL)
	return s
}

// Start serves the fake on addr (use 127.0.0.1:0 in tests).
func Start(addr string, cfg Config) (*Server, error) {
	s := New(cfg)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.listener = ln
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// StartForTest starts a fake on a loopback port and stops it when t ends.
func StartForTest(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Close stops serving and delivering, and ends every hold.
func (s *Server) Close() error {
	s.closed.Do(func() { close(s.closing) })
	s.webhooks.stop()
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// SetWebhookURL makes the fake deliver its events, those made so far that
// are still to be delivered included, to url.
func (s *Server) SetWebhookURL(url string) { s.webhooks.setURL(url) }

// FailNext queues faults for the next requests under idempotency key
// (LookupFaults: the next GETs), one a request, in order.
func (s *Server) FailNext(key string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[key] = append(s.faults[key], faults...)
}

// nextFault pops key's next fault; "" when none is queued.
func (s *Server) nextFault(key string) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[key]
	if len(q) == 0 {
		return ""
	}
	s.faults[key] = q[1:]
	return q[0]
}

// Release lets the request that FaultHold holds under key execute (and
// one that comes later go through at once).
func (s *Server) Release(key string) {
	ch := s.hold(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// hold is the channel Release closes for key.
func (s *Server) hold(key string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.holds[key]
	if !ok {
		ch = make(chan struct{})
		s.holds[key] = ch
	}
	return ch
}

// Requests are the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Executed counts the requests under key that started executing: what
// Stripe did, as opposed to what it replayed.
func (s *Server) Executed(key string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.IdempotencyKey == key && r.Executed {
			n++
		}
	}
	return n
}

// InFlight reports whether a request under key is executing.
func (s *Server) InFlight(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[key]
	return ok && k.inFlight
}

// Received counts the requests under key, replays and refusals included.
func (s *Server) Received(key string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.IdempotencyKey == key {
			n++
		}
	}
	return n
}

// Handler serves the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.post(s.createPaymentIntent))
	mux.HandleFunc("POST /v1/payment_intents/{id}/capture", s.post(s.capturePaymentIntent))
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.post(s.cancelPaymentIntent))
	mux.HandleFunc("GET /v1/payment_intents", s.get(s.listPaymentIntents))
	mux.HandleFunc("GET /v1/payment_intents/search", s.get(s.searchPaymentIntents))
	mux.HandleFunc("GET /v1/payment_intents/{id}", s.get(s.retrievePaymentIntent))
	mux.HandleFunc("POST /v1/refunds", s.post(s.createRefund))
	mux.HandleFunc("GET /v1/refunds", s.get(s.listRefunds))
	mux.HandleFunc("GET /v1/refunds/{id}", s.get(s.retrieveRefund))
	mux.HandleFunc("GET /v1/balance_transactions", s.get(s.listBalanceTransactions))
	mux.HandleFunc("GET /v1/payouts", s.get(s.listPayouts))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Message: "Unrecognized request URL (" + r.Method + ": " + r.URL.Path + ")."})
	})
	return mux
}

// authorized checks the request's API key; false has answered 401.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && key != "" && (s.cfg.SecretKey == "" || subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.SecretKey)) == 1) {
		return true
	}
	writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error", Message: "Invalid API Key provided."})
	return false
}

// record keeps a request for Requests.
func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// now is the fake's clock.
func (s *Server) now() time.Time { return s.cfg.Now() }

// nextID makes an id with prefix, in the order objects are made.
func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_3Fake%010d", prefix, s.seq)
}
