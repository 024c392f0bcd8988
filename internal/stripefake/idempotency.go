package stripefake

import (
	"net/http"
	"net/url"
	"time"
)

// keyLifetime is how long Stripe keeps an idempotency key's answer.
const keyLifetime = 24 * time.Hour

// maxKeyLength is the longest Idempotency-Key Stripe takes.
const maxKeyLength = 255

// savedAnswer is what the idempotency layer holds under a key.
type savedAnswer struct {
	params   string // the endpoint and its parameters, canonical
	inFlight bool
	at       time.Time
	answer   answer
}

// answer is an HTTP answer: a status and a JSON body.
type answer struct {
	status int
	body   []byte
}

// endpoint is one POST endpoint's own part. It validates the request's
// parameters (and that the objects they name exist) and returns either
// the refusal, decided before the idempotency layer and never saved, or
// what executing it does, which the layer runs once per key.
type endpoint func(r *http.Request, form url.Values) (execute func(fault Fault) answer, refused *refusal)

// refusal is a 4xx answered before the idempotency layer.
type refusal struct {
	status int
	err    apiError
}

// invalid is a 400 invalid_request_error about param.
func invalid(param, message string) *refusal {
	return &refusal{status: http.StatusBadRequest, err: apiError{Type: "invalid_request_error", Param: param, Message: message}}
}

// missing is a 404 resource_missing about param.
func missing(param, message string) *refusal {
	return &refusal{status: http.StatusNotFound, err: apiError{Type: "invalid_request_error", Code: "resource_missing", Param: param, Message: message}}
}

// post runs a POST endpoint under Stripe's idempotency layer.
func (s *Server) post(ep endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		rec := Request{Method: r.Method, Path: r.URL.Path, IdempotencyKey: key}
		recorded := false
		defer func() {
			if !recorded {
				s.record(rec)
			}
		}()
		if !s.authorized(w, r) {
			return
		}
		var fault Fault
		if key != "" {
			fault = s.nextFault(key)
		}
		switch fault {
		case FaultRateLimit:
			writeError(w, http.StatusTooManyRequests, apiError{Type: "invalid_request_error", Code: "rate_limit",
				Message: "Too many requests hit the API too quickly."})
			return
		case FaultInvalid:
			writeError(w, http.StatusBadRequest, invalid("", "This request is invalid (a refusal the test injected).").err)
			return
		}
		if len(key) > maxKeyLength {
			writeError(w, http.StatusBadRequest, invalid("", "Idempotency keys can be at most 255 characters long.").err)
			return
		}
		if err := r.ParseForm(); err != nil {
			writeError(w, http.StatusBadRequest, invalid("", "The request body cannot be read: "+err.Error()).err)
			return
		}
		execute, refused := ep(r, r.PostForm)
		if refused != nil {
			writeError(w, refused.status, refused.err)
			return
		}
		if key == "" {
			time.Sleep(s.cfg.Latency)
			a := execute(fault)
			rec.Executed = true
			writeJSON(w, a.status, a.body)
			return
		}
		params := r.URL.Path + "?" + r.PostForm.Encode() // Encode sorts by name
		saved, replay := s.claim(key, params)
		switch {
		case saved == nil:
		case saved.inFlight:
			writeError(w, http.StatusConflict, apiError{Type: "invalid_request_error", Code: "idempotency_key_in_use",
				Message: "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through)."})
			return
		case !replay:
			writeError(w, http.StatusBadRequest, apiError{Type: "idempotency_error",
				Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
			return
		default:
			rec.Replayed = true
			w.Header().Set("Idempotent-Replayed", "true")
			s.deliver(w, saved.answer, fault)
			return
		}
		if fault == "" && r.PostForm.Get("payment_method") == PMLostAnswer {
			// The test payment method's own fault, for the request that
			// executes only: a replay under the key answers.
			fault = FaultDrop
		}
		time.Sleep(s.cfg.Latency)
		switch fault {
		case FaultBusy:
			time.Sleep(s.cfg.SlowDelay)
		case FaultHold:
			select {
			case <-s.hold(key):
			case <-s.closing:
			}
		}
		var a answer
		if fault == Fault500Nothing {
			a = serverError()
		} else {
			a = execute(fault)
			rec.Executed = true
			if fault == Fault500 {
				a = serverError()
			}
		}
		s.save(key, a)
		// Recorded before the answer, which a fault may hold back.
		s.record(rec)
		recorded = true
		s.deliver(w, a, fault)
	}
}

// claim holds key for a request with params: nil when the key is new (or
// its answer expired), and this request now executes under it; otherwise
// what the key holds, and whether the request is the same as the one it
// holds (a replay) or not.
func (s *Server) claim(key, params string) (saved *savedAnswer, replay bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[key]; ok && s.now().Sub(k.at) < keyLifetime {
		c := *k
		return &c, k.params == params
	}
	s.keys[key] = &savedAnswer{params: params, inFlight: true, at: s.now()}
	return nil, false
}

// save keeps a's answer under key for keyLifetime.
func (s *Server) save(key string, a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	k.inFlight, k.answer = false, a
}

// deliver writes a, as fault would have it.
func (s *Server) deliver(w http.ResponseWriter, a answer, fault Fault) {
	switch fault {
	case FaultDrop:
		// The server closes the connection without writing an answer.
		panic(http.ErrAbortHandler)
	case FaultGateway502:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>\n"))
		return
	case FaultSlow:
		time.Sleep(s.cfg.SlowDelay)
	}
	writeJSON(w, a.status, a.body)
}

func serverError() answer {
	return answer{status: http.StatusInternalServerError, body: errorBody(apiError{Type: "api_error",
		Message: "An unknown error occurred while processing your request."})}
}

// get runs a GET endpoint: read only, no idempotency layer.
func (s *Server) get(h func(r *http.Request, q url.Values) (answer, *refusal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.record(Request{Method: r.Method, Path: r.URL.Path})
		if !s.authorized(w, r) {
			return
		}
		if s.nextFault(LookupFaults) == FaultLookup500 {
			a := serverError()
			writeJSON(w, a.status, a.body)
			return
		}
		a, refused := h(r, r.URL.Query())
		if refused != nil {
			writeError(w, refused.status, refused.err)
			return
		}
		writeJSON(w, a.status, a.body)
	}
}
