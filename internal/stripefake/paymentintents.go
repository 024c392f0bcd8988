package stripefake

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The test payment methods that pick a behaviour; any other pm_card_...
// approves.
const (
	// PMDeclined declines with card_error card_declined.
	PMDeclined = "pm_card_chargeDeclined"
	// PMThreeDSecure asks for 3-D Secure: requires_action.
	PMThreeDSecure = "pm_card_threeDSecureRequired"
	// PMProcessing leaves the PaymentIntent processing until
	// SettlePaymentIntent.
	PMProcessing = "pm_fake_processing"
	// PMLostAnswer approves, and the request that made the PaymentIntent
	// loses its answer: the connection is closed without one (FaultDrop),
	// while a replay under its key answers. It is how a client outside
	// the test's process (make dev's tour) asks for a lost answer.
	PMLostAnswer = "pm_fake_lostAnswer"
	// PMVisa approves.
	PMVisa = "pm_card_visa"
)

// form reads a request's parameters as Stripe's form encoding writes them
// (metadata[name]=value), and collects what is wrong with them.
type form struct {
	v       url.Values
	allowed map[string]bool // top-level names; "metadata" and "expand" take brackets
	bad     *refusal
}

func newForm(v url.Values, allowed ...string) *form {
	f := &form{v: v, allowed: map[string]bool{}}
	for _, a := range allowed {
		f.allowed[a] = true
	}
	for name := range v {
		top, _, _ := strings.Cut(name, "[")
		if !f.allowed[top] {
			f.fail(invalid(name, "Received unknown parameter: "+name))
		}
	}
	return f
}

func (f *form) fail(r *refusal) {
	if f.bad == nil {
		f.bad = r
	}
}

func (f *form) str(name string) string { return f.v.Get(name) }

// positive reads a positive integer; required says whether it must be
// there. 0 when absent.
func (f *form) positive(name string, required bool) int64 {
	s := f.v.Get(name)
	if s == "" {
		if required {
			f.fail(invalid(name, "Missing required param: "+name+"."))
		}
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		f.fail(invalid(name, "Invalid positive integer: "+name))
		return 0
	}
	return n
}

func (f *form) boolean(name string) bool {
	switch s := f.v.Get(name); s {
	case "", "false":
		return false
	case "true":
		return true
	default:
		f.fail(invalid(name, "Invalid boolean: "+s))
		return false
	}
}

func (f *form) oneOf(name, def string, values ...string) string {
	s := f.v.Get(name)
	if s == "" {
		return def
	}
	for _, v := range values {
		if s == v {
			return s
		}
	}
	f.fail(invalid(name, fmt.Sprintf("Invalid %s: must be one of %s", name, strings.Join(values, ", "))))
	return def
}

var metadataName = regexp.MustCompile(`^metadata\[([^\[\]]+)\]$`)

// metadata reads metadata[name]=value, as Stripe bounds it: 50 names of at
// most 40 characters, values of at most 500.
func (f *form) metadata() map[string]string {
	m := map[string]string{}
	for name, vs := range f.v {
		sub := metadataName.FindStringSubmatch(name)
		if sub == nil {
			continue
		}
		if len(sub[1]) > 40 || len(vs[0]) > 500 {
			f.fail(invalid(name, "Metadata keys are at most 40 characters and values at most 500."))
		}
		m[sub[1]] = vs[0]
	}
	if len(m) > 50 {
		f.fail(invalid("metadata", "Metadata has at most 50 keys."))
	}
	return m
}

// currencies are the currencies the fake takes: a few of each exponent.
var currencies = map[string]bool{"usd": true, "eur": true, "rub": true, "gbp": true, "jpy": true, "krw": true, "kwd": true, "bhd": true, "jod": true}

func (f *form) currency() string {
	c := f.v.Get("currency")
	switch {
	case c == "":
		f.fail(invalid("currency", "Missing required param: currency."))
	case !currencies[c]:
		f.fail(invalid("currency", "Invalid currency: "+c+"."))
	}
	return c
}

// createPaymentIntent is POST /v1/payment_intents.
func (s *Server) createPaymentIntent(_ *http.Request, v url.Values) (func(Fault) answer, *refusal) {
	f := newForm(v, "amount", "currency", "confirm", "capture_method", "payment_method", "payment_method_types", "metadata", "expand", "description")
	amount := f.positive("amount", true)
	currency := f.currency()
	confirm := f.boolean("confirm")
	captureMethod := f.oneOf("capture_method", "automatic_async", "automatic", "automatic_async", "manual")
	pm := f.str("payment_method")
	metadata := f.metadata()
	switch {
	case confirm && pm == "":
		f.fail(invalid("payment_method", "You cannot confirm this PaymentIntent because it's missing a payment method."))
	case pm != "" && !strings.HasPrefix(pm, "pm_card_") && pm != PMProcessing && pm != PMLostAnswer:
		f.fail(missing("payment_method", "No such PaymentMethod: '"+pm+"'"))
	}
	if f.bad != nil {
		return nil, f.bad
	}
	return func(Fault) answer {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.now()
		p := &paymentIntent{ID: s.nextID("pi"), Object: "payment_intent", Amount: amount, Currency: currency,
			CaptureMethod: captureMethod, ConfirmationMethod: "automatic", Created: now.Unix(), Metadata: metadata,
			PaymentMethodTypes: []string{"card"}, Status: statusRequiresPaymentMethod,
			seq: s.seq, searchableAt: now.Add(s.cfg.SearchLag)}
		if pm != "" {
			p.PaymentMethod = ptr(pm)
			p.Status = statusRequiresConfirmation
		}
		s.intents[p.ID] = p
		if !confirm {
			return answer{http.StatusOK, encode(p)}
		}
		return s.confirm(p, pm)
	}, nil
}

// confirm carries a new PaymentIntent's confirmation out, as its payment
// method picks; under s.mu.
func (s *Server) confirm(p *paymentIntent, pm string) answer {
	switch pm {
	case PMDeclined:
		p.LatestCharge = ptr(s.nextID("ch"))
		p.Status = statusRequiresPaymentMethod
		p.LastPaymentError = &apiError{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline",
			Message: "Your card was declined.", Charge: *p.LatestCharge}
		s.event("payment_intent.payment_failed", copyIntent(p))
		e := *p.LastPaymentError
		e.PaymentIntent = copyIntent(p)
		return answer{http.StatusPaymentRequired, errorBody(e)}
	case PMThreeDSecure:
		p.Status = statusRequiresAction
		p.NextAction = &nextAction{Type: "use_stripe_sdk"}
		s.event("payment_intent.requires_action", copyIntent(p))
	case PMProcessing:
		p.Status = statusProcessing
		s.event("payment_intent.processing", copyIntent(p))
	default:
		s.approve(p)
	}
	return answer{http.StatusOK, encode(p)}
}

// approve makes p's charge: captured at once, or held; under s.mu.
func (s *Server) approve(p *paymentIntent) {
	p.LatestCharge = ptr(s.nextID("ch"))
	if p.CaptureMethod == "manual" {
		p.Status, p.AmountCapturable = statusRequiresCapture, p.Amount
		s.event("payment_intent.amount_capturable_updated", copyIntent(p))
		return
	}
	p.Status, p.AmountReceived = statusSucceeded, p.Amount
	s.event("payment_intent.succeeded", copyIntent(p))
}

// intent is the PaymentIntent the path names, or the refusal.
func (s *Server) intent(r *http.Request) (*paymentIntent, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.intents[r.PathValue("id")]
	if !ok {
		return nil, missing("intent", "No such payment_intent: '"+r.PathValue("id")+"'")
	}
	return p, nil
}

// unexpectedState is the 400 of an action the PaymentIntent's status does
// not allow.
func unexpectedState(p *paymentIntent, action string) answer {
	return answer{http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "payment_intent_unexpected_state",
		Message:       fmt.Sprintf("This PaymentIntent could not be %s because it has a status of %s.", action, p.Status),
		PaymentIntent: copyIntent(p)})}
}

// capturePaymentIntent is POST /v1/payment_intents/{id}/capture: a
// partial capture releases the rest.
func (s *Server) capturePaymentIntent(r *http.Request, v url.Values) (func(Fault) answer, *refusal) {
	f := newForm(v, "amount_to_capture", "metadata", "expand")
	amount := f.positive("amount_to_capture", false)
	metadata := f.metadata()
	if f.bad != nil {
		return nil, f.bad
	}
	p, refused := s.intent(r)
	if refused != nil {
		return nil, refused
	}
	return func(Fault) answer {
		s.mu.Lock()
		defer s.mu.Unlock()
		if p.Status != statusRequiresCapture {
			return unexpectedState(p, "captured")
		}
		if amount == 0 {
			amount = p.AmountCapturable
		}
		if amount > p.AmountCapturable {
			return answer{http.StatusBadRequest, errorBody(apiError{Type: "invalid_request_error", Code: "amount_too_large", Param: "amount_to_capture",
				Message: "The amount to capture is greater than the amount capturable."})}
		}
		for k, val := range metadata {
			p.Metadata[k] = val
		}
		p.Status, p.AmountReceived, p.AmountCapturable = statusSucceeded, amount, 0
		s.event("payment_intent.succeeded", copyIntent(p))
		return answer{http.StatusOK, encode(p)}
	}, nil
}

// cancelPaymentIntent is POST /v1/payment_intents/{id}/cancel.
func (s *Server) cancelPaymentIntent(r *http.Request, v url.Values) (func(Fault) answer, *refusal) {
	f := newForm(v, "cancellation_reason", "expand")
	reason := f.oneOf("cancellation_reason", "", "duplicate", "fraudulent", "requested_by_customer", "abandoned")
	if f.bad != nil {
		return nil, f.bad
	}
	p, refused := s.intent(r)
	if refused != nil {
		return nil, refused
	}
	return func(Fault) answer {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch p.Status {
		case statusRequiresPaymentMethod, statusRequiresConfirmation, statusRequiresAction, statusRequiresCapture:
		default:
			return unexpectedState(p, "canceled")
		}
		var why *string
		if reason != "" {
			why = ptr(reason)
		}
		s.cancel(p, why)
		return answer{http.StatusOK, encode(p)}
	}, nil
}

// cancel cancels p for reason; under s.mu.
func (s *Server) cancel(p *paymentIntent, reason *string) {
	p.Status, p.AmountCapturable, p.CancellationReason = statusCanceled, 0, reason
	p.CanceledAt = ptr(s.now().Unix())
	p.NextAction = nil
	s.event("payment_intent.canceled", copyIntent(p))
}

// retrievePaymentIntent is GET /v1/payment_intents/{id}.
func (s *Server) retrievePaymentIntent(r *http.Request, _ url.Values) (answer, *refusal) {
	p, refused := s.intent(r)
	if refused != nil {
		return answer{}, refused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return answer{http.StatusOK, encode(p)}, nil
}

// page reads limit, starting_after and ending_before.
type page struct {
	limit                       int
	startingAfter, endingBefore string
}

func (f *form) page() page {
	p := page{limit: 10, startingAfter: f.str("starting_after"), endingBefore: f.str("ending_before")}
	if s := f.str("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			f.fail(invalid("limit", "limit must be between 1 and 100."))
		}
		p.limit = n
	}
	if p.startingAfter != "" && p.endingBefore != "" {
		f.fail(invalid("starting_after", "You may only specify one of these parameters: starting_after, ending_before."))
	}
	return p
}

// created reads the created filter: created=<t> or created[gte|gt|lte|lt]=<t>.
func (f *form) created() func(int64) bool {
	var tests []func(int64) bool
	for name, vs := range f.v {
		if name != "created" && !strings.HasPrefix(name, "created[") {
			continue
		}
		t, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil {
			f.fail(invalid(name, "Invalid timestamp: "+vs[0]))
			continue
		}
		switch name {
		case "created":
			tests = append(tests, func(c int64) bool { return c == t })
		case "created[gte]":
			tests = append(tests, func(c int64) bool { return c >= t })
		case "created[gt]":
			tests = append(tests, func(c int64) bool { return c > t })
		case "created[lte]":
			tests = append(tests, func(c int64) bool { return c <= t })
		case "created[lt]":
			tests = append(tests, func(c int64) bool { return c < t })
		default:
			f.fail(invalid(name, "Received unknown parameter: "+name))
		}
	}
	return func(c int64) bool {
		for _, t := range tests {
			if !t(c) {
				return false
			}
		}
		return true
	}
}

// paged is one page of objects, newest first, by p.
func paged[T any](all []T, id func(T) string, p page) (out []T, hasMore bool) {
	start, end := 0, len(all)
	for i, o := range all {
		if id(o) == p.startingAfter {
			start = i + 1
		}
		if id(o) == p.endingBefore {
			end = i
		}
	}
	window := all[start:end]
	if p.endingBefore != "" { // the page just before ending_before
		from := max(0, len(window)-p.limit)
		return window[from:], from > 0
	}
	if len(window) > p.limit {
		return window[:p.limit], true
	}
	return window, false
}

// listPaymentIntents is GET /v1/payment_intents: created filters, pages of
// at most 100, newest first; strongly consistent.
func (s *Server) listPaymentIntents(_ *http.Request, q url.Values) (answer, *refusal) {
	f := newForm(q, "created", "limit", "starting_after", "ending_before", "expand", "customer")
	inWindow := f.created()
	pg := f.page()
	if f.bad != nil {
		return answer{}, f.bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*paymentIntent
	for _, p := range s.intents {
		if inWindow(p.Created) {
			all = append(all, p)
		}
	}
	newestFirst(all, func(p *paymentIntent) (int64, int64) { return p.Created, p.seq })
	items, more := paged(all, func(p *paymentIntent) string { return p.ID }, pg)
	data := make([]any, len(items))
	for i, p := range items {
		data[i] = copyIntent(p)
	}
	return answer{http.StatusOK, encode(list{Object: "list", Data: data, HasMore: more, URL: "/v1/payment_intents"})}, nil
}

// newestFirst sorts by created, then by the order made, newest first.
func newestFirst[T any](all []T, key func(T) (created, seq int64)) {
	sort.Slice(all, func(i, j int) bool {
		ci, si := key(all[i])
		cj, sj := key(all[j])
		if ci != cj {
			return ci > cj
		}
		return si > sj
	})
}

// searchQuery is metadata['name']:'value', the value's quotes and
// backslashes escaped with a backslash.
var searchQuery = regexp.MustCompile(`^metadata\['([^']+)'\]:'((?:[^'\\]|\\.)*)'$`)

var searchUnescape = strings.NewReplacer(`\\`, `\`, `\'`, `'`)

// searchPaymentIntents is GET /v1/payment_intents/search, for
// metadata['name']:'value' queries: it sees only what its index has caught
// up with (Config.SearchLag).
func (s *Server) searchPaymentIntents(_ *http.Request, q url.Values) (answer, *refusal) {
	f := newForm(q, "query", "limit", "page", "expand")
	query := f.str("query")
	sub := searchQuery.FindStringSubmatch(query)
	if sub == nil {
		f.fail(invalid("query", "The fake searches metadata['name']:'value' only; got "+query))
	}
	limit := 10
	if l := f.str("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			f.fail(invalid("limit", "limit must be between 1 and 100."))
		}
		limit = n
	}
	if f.bad != nil {
		return answer{}, f.bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var found []*paymentIntent
	for _, p := range s.intents {
		if !now.Before(p.searchableAt) && p.Metadata[sub[1]] == searchUnescape.Replace(sub[2]) {
			found = append(found, p)
		}
	}
	newestFirst(found, func(p *paymentIntent) (int64, int64) { return p.Created, p.seq })
	more := len(found) > limit
	if more {
		found = found[:limit]
	}
	data := make([]any, len(found))
	for i, p := range found {
		data[i] = copyIntent(p)
	}
	return answer{http.StatusOK, encode(list{Object: "search_result", Data: data, HasMore: more, URL: "/v1/payment_intents/search"})}, nil
}

// SettlePaymentIntent moves a processing PaymentIntent on: approved
// (succeeded, or requires_capture) or its payment failed.
func (s *Server) SettlePaymentIntent(id string, approve bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.intents[id]
	if !ok || p.Status != statusProcessing {
		return fmt.Errorf("payment intent %q is not processing", id)
	}
	if approve {
		s.approve(p)
		return nil
	}
	p.Status = statusRequiresPaymentMethod
	p.LastPaymentError = &apiError{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined."}
	s.event("payment_intent.payment_failed", copyIntent(p))
	return nil
}

// ExpireHold lapses a held PaymentIntent's authorization, as Stripe does
// after its capture window: canceled, cancellation_reason automatic.
func (s *Server) ExpireHold(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.intents[id]
	if !ok || p.Status != statusRequiresCapture {
		return fmt.Errorf("payment intent %q holds nothing", id)
	}
	s.cancel(p, ptr("automatic"))
	return nil
}

// PaymentIntent is a PaymentIntent as tests read it.
type PaymentIntent struct {
	ID, Status, Currency, CaptureMethod string
	Amount, AmountReceived              int64
	AmountCapturable                    int64
	// AmountRefunded is what its refunds took (pending ones included).
	AmountRefunded     int64
	Metadata           map[string]string
	Created            time.Time
	CancellationReason string
	// Charged: it made a charge (its latest_charge), declined or not.
	Charged bool
	// PaymentError is its last payment error's code (card_declined), ""
	// when it has none: a charge that was made and not declined held or
	// took the money.
	PaymentError string
}

// PaymentIntentByMetadata is the PaymentIntent whose metadata[name] is
// value (the last made, if several are).
func (s *Server) PaymentIntentByMetadata(name, value string) (PaymentIntent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found *paymentIntent
	for _, p := range s.intents {
		if p.Metadata[name] == value && (found == nil || p.seq > found.seq) {
			found = p
		}
	}
	if found == nil {
		return PaymentIntent{}, false
	}
	return found.snapshot(), true
}

// snapshot is p as tests read it; under s.mu.
func (p *paymentIntent) snapshot() PaymentIntent {
	out := PaymentIntent{ID: p.ID, Status: p.Status, Currency: p.Currency, CaptureMethod: p.CaptureMethod,
		Amount: p.Amount, AmountReceived: p.AmountReceived, AmountCapturable: p.AmountCapturable, AmountRefunded: p.refunded,
		Metadata: copyMap(p.Metadata), Created: time.Unix(p.Created, 0), Charged: p.LatestCharge != nil}
	if p.CancellationReason != nil {
		out.CancellationReason = *p.CancellationReason
	}
	if p.LastPaymentError != nil {
		out.PaymentError = p.LastPaymentError.Code
	}
	return out
}

// PaymentIntents counts the PaymentIntents made.
func (s *Server) PaymentIntents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.intents)
}
