package sandboxprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Handler serves the provider's HTTP API. done ends the waits (latency,
// slow answers) when the server stops.
func (p *Provider) Handler(done <-chan struct{}) http.Handler {
	h := &handler{p: p, done: done}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", create(h, charges))
	mux.HandleFunc("GET /v1/charges", lookup(h, charges))
	mux.HandleFunc("POST /v1/refunds", create(h, refunds))
	mux.HandleFunc("GET /v1/refunds", lookup(h, refunds))
	mux.HandleFunc("POST /v1/authorizations", create(h, authorizations))
	mux.HandleFunc("GET /v1/authorizations", lookup(h, authorizations))
	mux.HandleFunc("POST /v1/captures", create(h, captures))
	mux.HandleFunc("GET /v1/captures", lookup(h, captures))
	mux.HandleFunc("POST /v1/voids", create(h, voids))
	mux.HandleFunc("GET /v1/voids", lookup(h, voids))
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, p.Ledger())
	})
	p.balanceRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

type handler struct {
	p    *Provider
	done <-chan struct{}
}

// Error types of the API's JSON errors.
const (
	ErrTypeInvalidRequest = "invalid_request"
	ErrTypeKeyReused      = "idempotency_key_reused"
	ErrTypeInProgress     = "idempotency_request_in_progress"
	ErrTypeUnavailable    = "api_unavailable"
	ErrTypeRequestExpired = "request_expired"
	ErrTypeChargeNotFound = "charge_not_found"
	ErrTypeRefundNotFound = "refund_not_found"

	ErrTypeAuthorizationNotFound = "authorization_not_found"
	ErrTypeCaptureNotFound       = "capture_not_found"
	ErrTypeVoidNotFound          = "void_not_found"
)

const (
	headerIdempotencyKey = "Idempotency-Key"
	headerReplayed       = "Idempotent-Replayed"
	// HeaderRequestSentAt is when the client sent the request (RFC 3339):
	// a request older than Config.MaxRequestAge is refused.
	HeaderRequestSentAt = "Request-Sent-At"
	// HeaderRequestMaxAge is the bound the client waits out, in
	// milliseconds: a request older than it (or than Config.MaxRequestAge,
	// if shorter) is refused, so that the provider and its client can
	// never disagree on it.
	HeaderRequestMaxAge    = "Request-Max-Age"
	maxKeyOrReferenceBytes = 255
)

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	Amount    string `json:"amount"` // a decimal string, such as "100.50"
	Currency  string `json:"currency"`
	Reference string `json:"reference"`
}

// RefundRequest is the body of POST /v1/refunds: the fields of a charge
// request (the amount to give back, the charge's currency, the refund's
// own reference), and the charge.
type RefundRequest struct {
	// Charge is the idempotency key the charge was made under: the one
	// name of a charge that its payer holds before the answer comes back.
	Charge string `json:"charge"`
	ChargeRequest
}

// CaptureRequest is the body of POST /v1/captures: the fields of a charge
// request (the amount to take, at most what is held; the authorization's
// currency; the capture's own reference), and the authorization.
type CaptureRequest struct {
	// Authorization is the idempotency key the authorization was made
	// under.
	Authorization string `json:"authorization"`
	ChargeRequest
}

// VoidRequest is the body of POST /v1/voids.
type VoidRequest struct {
	// Authorization is the idempotency key the authorization was made
	// under.
	Authorization string `json:"authorization"`
	// Reference is the void's own, optional: a void without one meets the
	// faults of its authorization's reference.
	Reference string `json:"reference,omitempty"`
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		// Charged is false when the provider states that nothing was
		// charged for this charge request; absent when it cannot say.
		Charged *bool `json:"charged,omitempty"`
		// Refunded, Authorized, Captured and Voided are the same for a
		// refund, authorization, capture or void request.
		Refunded   *bool `json:"refunded,omitempty"`
		Authorized *bool `json:"authorized,omitempty"`
		Captured   *bool `json:"captured,omitempty"`
		Voided     *bool `json:"voided,omitempty"`
	} `json:"error"`
}

// kind is what the API's handlers need of one kind of keyed request; the
// handlers, their idempotency answers and their faults are the same for
// every kind.
type kind[R keyedRequest[R], A any] struct {
	noun     string // "charge": in messages
	done     string // "charged": what a refusal says did not happen
	notFound string // the lookup's error type for a key that holds nothing
	// flag is the error body's field that says whether it was done.
	flag  func(*ErrorBody) **bool
	book  func(*Provider) *book[R, A]
	parse func(io.Reader) (R, error)
	// decide makes the decision of a key admitted as new, with p.mu held;
	// an error refuses the request for good, with nothing recorded.
	decide func(p *Provider, key string, req R) (A, error)
	// bind, when set, completes a request from the provider's state
	// before its key is looked at, with p.mu held.
	bind func(p *Provider, req R) R
	// view, when set, is what the lookup answers for a decided key, with
	// p.mu held; otherwise the decided answer itself.
	view func(p *Provider, key string, a A) any
	// modification, set for captures, refunds and voids, is how the kind
	// is received and decided later in the received mode
	// (modifications.go).
	modification *modification[R, A]
}

// nothingDone marks an error body as saying that nothing was done for the
// request: "charged": false, or "refunded": false.
func (k kind[R, A]) nothingDone(e *ErrorBody) {
	no := false
	*k.flag(e) = &no
}

var charges = kind[chargeRequest, ChargeAnswer]{noun: "charge", done: "charged", notFound: ErrTypeChargeNotFound,
	flag:  func(e *ErrorBody) **bool { return &e.Error.Charged },
	book:  func(p *Provider) *book[chargeRequest, ChargeAnswer] { return p.charges },
	parse: parseChargeRequest, decide: (*Provider).decideCharge}

var refunds = kind[refundRequest, RefundAnswer]{noun: "refund", done: "refunded", notFound: ErrTypeRefundNotFound,
	flag:  func(e *ErrorBody) **bool { return &e.Error.Refunded },
	book:  func(p *Provider) *book[refundRequest, RefundAnswer] { return p.refunds },
	parse: parseRefundRequest, decide: (*Provider).decideRefund, modification: refundModification}

var authorizations = kind[chargeRequest, AuthorizationAnswer]{noun: "authorization", done: "authorized", notFound: ErrTypeAuthorizationNotFound,
	flag:  func(e *ErrorBody) **bool { return &e.Error.Authorized },
	book:  func(p *Provider) *book[chargeRequest, AuthorizationAnswer] { return p.authorizations },
	parse: parseAuthorizationRequest, decide: (*Provider).decideAuthorization, view: authorizationView}

var captures = kind[captureRequest, CaptureAnswer]{noun: "capture", done: "captured", notFound: ErrTypeCaptureNotFound,
	flag:  func(e *ErrorBody) **bool { return &e.Error.Captured },
	book:  func(p *Provider) *book[captureRequest, CaptureAnswer] { return p.captures },
	parse: parseCaptureRequest, decide: (*Provider).decideCapture, modification: captureModification}

var voids = kind[voidRequest, VoidAnswer]{noun: "void", done: "voided", notFound: ErrTypeVoidNotFound,
	flag:  func(e *ErrorBody) **bool { return &e.Error.Voided },
	book:  func(p *Provider) *book[voidRequest, VoidAnswer] { return p.voids },
	parse: parseVoidRequest, decide: (*Provider).decideVoid, bind: (*Provider).bindVoid, modification: voidModification}

// create serves POST for a kind: the key's admission, the processing of a
// new key, the fault the request meets, and the answer.
func create[R keyedRequest[R], A any](h *handler, k kind[R, A]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(headerIdempotencyKey)
		if key == "" || len(key) > maxKeyOrReferenceBytes {
			writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, "an Idempotency-Key header of 1 to 255 bytes is required", nil)
			return
		}
		req, err := k.parse(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, err.Error(), nil)
			return
		}
		if bound, expired := h.expired(r); expired {
			h.p.mu.Lock()
			k.book(h.p).counts.Expired++
			h.p.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, ErrTypeRequestExpired,
				"the request was sent more than "+bound.String()+" ago; nothing was "+k.done, k.nothingDone)
			return
		}

		h.p.mu.Lock()
		h.p.expireLocked()
		if k.bind != nil {
			req = k.bind(h.p, req)
		}
		adm, fault, answer, received := k.book(h.p).begin(h.p, key, req)
		h.p.mu.Unlock()
		switch adm {
		case admitConflict:
			writeError(w, http.StatusUnprocessableEntity, ErrTypeKeyReused,
				"this idempotency key was used with other parameters; nothing was "+k.done, nil)
			return
		case admitInProgress:
			writeError(w, http.StatusConflict, ErrTypeInProgress, "a request with this idempotency key is being processed", nil)
			return
		case admitRefused:
			if fault == FaultRefused {
				writeError(w, http.StatusUnprocessableEntity, ErrTypeInvalidRequest,
					"this "+k.noun+" request is refused; nothing was "+k.done, k.nothingDone)
				return
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, ErrTypeUnavailable, "temporarily unavailable; nothing was "+k.done, k.nothingDone)
			return
		case admitNew:
			// Processing goes on even if the client goes away, as at a real
			// provider: the client then does not know the outcome.
			h.wait(nil, h.p.cfg.Latency)
			h.p.mu.Lock()
			if k.receives(h.p) {
				answer, received = k.receive(h.p, key, req), true
			} else {
				answer, err = k.decide(h.p, key, req)
			}
			h.p.mu.Unlock()
			if err != nil {
				writeError(w, http.StatusUnprocessableEntity, ErrTypeInvalidRequest, err.Error(), k.nothingDone)
				return
			}
		}

		switch fault {
		case FaultDrop:
			// The charge (or refund) is made; the answer is lost. The server closes the
			// connection without writing anything.
			panic(http.ErrAbortHandler)
		case FaultBadGateway:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
			return
		case FaultSlow:
			h.wait(r.Context().Done(), h.p.cfg.SlowDelay)
		}
		if adm == admitReplay {
			w.Header().Set(headerReplayed, "true")
		}
		status := http.StatusOK
		if received {
			// Received, not decided: the decision comes as an event.
			status = http.StatusAccepted
		}
		writeJSON(w, status, answer)
	}
}

// expired reports whether r arrived later after its Request-Sent-At than
// the bound it is judged by, and that bound: the provider's own
// (Config.MaxRequestAge) or the one the request declares
// (Request-Max-Age, in milliseconds: the client waits that long before it
// takes "nothing" for a proof), whichever is shorter. A request without
// Request-Sent-At, or with one that does not parse, is not judged by age.
func (h *handler) expired(r *http.Request) (time.Duration, bool) {
	bound := h.p.cfg.MaxRequestAge
	if ms, err := strconv.ParseInt(r.Header.Get(HeaderRequestMaxAge), 10, 64); err == nil && ms > 0 {
		if declared := time.Duration(ms) * time.Millisecond; bound <= 0 || declared < bound {
			bound = declared
		}
	}
	if bound <= 0 {
		return 0, false
	}
	sent, err := time.Parse(time.RFC3339Nano, r.Header.Get(HeaderRequestSentAt))
	return bound, err == nil && h.p.now().Sub(sent) > bound
}

// wait sleeps for d, or until the server stops or cancel is closed.
func (h *handler) wait(cancel <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.done:
	case <-cancel:
	}
}

// lookup serves GET ?idempotency_key= for a kind: what the key holds,
// without doing anything.
func lookup[R keyedRequest[R], A any](h *handler, k kind[R, A]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("idempotency_key")
		if key == "" {
			writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, "the idempotency_key parameter is required", nil)
			return
		}
		h.p.mu.Lock()
		h.p.expireLocked()
		answer, _, found := k.book(h.p).lookup(key)
		var body any = answer
		if found == LookupCharged && k.view != nil {
			body = k.view(h.p, key, answer)
		}
		h.p.mu.Unlock()
		switch found {
		case LookupNone:
			writeError(w, http.StatusNotFound, k.notFound, "no "+k.noun+" was made with this idempotency key", nil)
		case LookupProcessing:
			writeError(w, http.StatusConflict, ErrTypeInProgress, "a request with this idempotency key is being processed", nil)
		default:
			writeJSON(w, http.StatusOK, body)
		}
	}
}

func parseChargeRequest(body io.Reader) (chargeRequest, error) {
	var in ChargeRequest
	if err := decodeBody(body, "charge", &in); err != nil {
		return chargeRequest{}, err
	}
	return in.parse()
}

func parseRefundRequest(body io.Reader) (refundRequest, error) {
	var in RefundRequest
	if err := decodeBody(body, "refund", &in); err != nil {
		return refundRequest{}, err
	}
	common, err := in.ChargeRequest.parse()
	if err != nil {
		return refundRequest{}, err
	}
	if in.Charge == "" || len(in.Charge) > maxKeyOrReferenceBytes {
		return refundRequest{}, errors.New("charge must be the charge's idempotency key, 1 to 255 bytes")
	}
	return refundRequest{chargeRequest: common, Charge: in.Charge}, nil
}

func parseAuthorizationRequest(body io.Reader) (chargeRequest, error) {
	var in ChargeRequest
	if err := decodeBody(body, "authorization", &in); err != nil {
		return chargeRequest{}, err
	}
	return in.parse()
}

func parseCaptureRequest(body io.Reader) (captureRequest, error) {
	var in CaptureRequest
	if err := decodeBody(body, "capture", &in); err != nil {
		return captureRequest{}, err
	}
	common, err := in.ChargeRequest.parse()
	if err != nil {
		return captureRequest{}, err
	}
	if err := authorizationKey(in.Authorization); err != nil {
		return captureRequest{}, err
	}
	return captureRequest{chargeRequest: common, Authorization: in.Authorization}, nil
}

func parseVoidRequest(body io.Reader) (voidRequest, error) {
	var in VoidRequest
	if err := decodeBody(body, "void", &in); err != nil {
		return voidRequest{}, err
	}
	if err := authorizationKey(in.Authorization); err != nil {
		return voidRequest{}, err
	}
	if len(in.Reference) > maxKeyOrReferenceBytes {
		return voidRequest{}, errors.New("reference must be at most 255 bytes")
	}
	return voidRequest{Authorization: in.Authorization, Reference: in.Reference}, nil
}

// authorizationKey validates a capture's or a void's authorization field.
func authorizationKey(key string) error {
	if key == "" || len(key) > maxKeyOrReferenceBytes {
		return errors.New("authorization must be the authorization's idempotency key, 1 to 255 bytes")
	}
	return nil
}

// decodeBody reads one JSON object of known fields into v.
func decodeBody(body io.Reader, noun string, v any) error {
	dec := json.NewDecoder(io.LimitReader(body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body must be a JSON %s request: %w", noun, err)
	}
	return nil
}

// parse validates the fields every kind of request has.
func (in ChargeRequest) parse() (chargeRequest, error) {
	if len(in.Amount) == 0 || len(in.Amount) > 32 {
		return chargeRequest{}, errors.New("amount must be a decimal string")
	}
	amount, err := decimal.NewFromString(in.Amount)
	if err != nil || !amount.IsPositive() {
		return chargeRequest{}, errors.New("amount must be a positive decimal string")
	}
	if len(in.Currency) != 3 {
		return chargeRequest{}, errors.New("currency must be a 3-letter code")
	}
	if in.Reference == "" || len(in.Reference) > maxKeyOrReferenceBytes {
		return chargeRequest{}, errors.New("reference must be 1 to 255 bytes")
	}
	return chargeRequest{Amount: amount, Currency: in.Currency, Reference: in.Reference}, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers an error; nothingDone, when not nil, marks the body
// as saying that nothing was done for the request.
func writeError(w http.ResponseWriter, status int, typ, msg string, nothingDone func(*ErrorBody)) {
	var body ErrorBody
	body.Error.Type, body.Error.Message = typ, msg
	if nothingDone != nil {
		nothingDone(&body)
	}
	writeJSON(w, status, body)
}

// Server is a provider serving its API on a real TCP listener.
type Server struct {
	*Provider
	// URL is the base URL, such as http://127.0.0.1:41234.
	URL string

	srv     *http.Server
	done    chan struct{}
	errc    chan error
	sweeper sync.WaitGroup
}

// Start serves a new provider on addr ("127.0.0.1:0" for any free port)
// until Close.
func Start(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sandbox provider: listen on %s: %w", addr, err)
	}
	return Serve(ln, cfg), nil
}

// TB is what StartForTest needs of a *testing.T.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// StartForTest serves a new provider on a free loopback port until the
// test ends.
func StartForTest(t TB, cfg Config) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Serve serves a new provider on ln until Close.
func Serve(ln net.Listener, cfg Config) *Server {
	p := New(cfg)
	s := &Server{Provider: p, URL: "http://" + ln.Addr().String(), done: make(chan struct{}), errc: make(chan error, 1)}
	s.srv = &http.Server{
		Handler:           p.Handler(s.done),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { s.errc <- s.srv.Serve(ln) }()
	p.webhooks.start()
	if p.cfg.HoldSweep > 0 {
		s.sweeper.Go(s.sweep)
	}
	if p.cfg.Balance.PayoutInterval > 0 {
		s.sweeper.Go(s.payOutEvery)
	}
	return s
}

// sweep notices lapsed holds every HoldSweep until the server stops, so
// that each is reported without waiting for a request.
func (s *Server) sweep() {
	t := time.NewTicker(s.cfg.HoldSweep)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.ExpireHolds()
		}
	}
}

// Close stops the server at once: waits end, connections close, the
// sweep and webhook deliveries stop.
func (s *Server) Close() error {
	close(s.done)
	err := s.srv.Close()
	s.sweeper.Wait()
	s.stopDecisions()
	s.webhooks.close()
	if serveErr := <-s.errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// Shutdown stops accepting and lets answers in flight finish until ctx
// ends; waits (latency, slow answers) are cut short. Webhook deliveries
// stop after the answers, whose decisions may have queued events: what is
// still queued is lost with the in-memory ledger.
func (s *Server) Shutdown(ctx context.Context) error {
	close(s.done)
	err := s.srv.Shutdown(ctx)
	s.sweeper.Wait()
	s.stopDecisions()
	s.webhooks.close()
	if serveErr := <-s.errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// FetchLedger reads a provider's ledger over HTTP: the ground truth of what
// was charged, for tests whose provider runs in another process.
func FetchLedger(ctx context.Context, baseURL string) (Ledger, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/ledger", nil)
	if err != nil {
		return Ledger{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Ledger{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Ledger{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Ledger{}, fmt.Errorf("ledger: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	var l Ledger
	if err := json.Unmarshal(b, &l); err != nil {
		return Ledger{}, fmt.Errorf("ledger: %w", err)
	}
	return l, nil
}
