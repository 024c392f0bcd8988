// Package sandboxprovider is a sandbox payment provider that runs as its own
// HTTP service: the stand-in, in development and tests, for a real provider
// on the other side of a network. It is not part of payment-service; the
// service talks to it only over HTTP, through internal/provider/sandbox.
//
// Its API is small and Stripe-like:
//
//	POST /v1/charges                     create a charge; Idempotency-Key header required
//	     {"amount":"100.50","currency":"RUB","reference":"pi_1"}
//	GET  /v1/charges?idempotency_key=K   look a charge up by its key (404 if none, 409 while processing)
//	GET  /v1/ledger                      every charge and the counters, for tests
//	GET  /healthz                        200 while serving
//
// Errors are plain JSON: {"error":{"type":"...","message":"...","charged":false}}.
//
// It keeps the idempotency promises real providers document:
//
//   - the same key with the same parameters returns the first answer and
//     charges nothing new (Idempotent-Replayed: true);
//   - the same key with other parameters is refused with 422
//     idempotency_key_reused: never a second charge, never another amount;
//   - the same key while its first request is still being processed is
//     refused with 409 idempotency_request_in_progress.
//
// And it fails the way real providers fail, deterministically by the
// reference's prefix (so demos and tests can pick a fault) and, for any other
// reference, at seeded random rates (Config.FaultRates, for load and fault
// runs):
//
//	decline_...  declined (a decision, recorded like an approval)
//	fail_...     503 before charging, saying so ("charged": false), every time
//	drop_...     charges, then drops the connection without an answer
//	gw502_...    charges, then answers 502 as a gateway would
//	slow_...     charges, then answers after Config.SlowDelay (longer than a client waits)
//	busy_...     refuses as "in progress" without charging
//	refuse_...   422 invalid_request before charging ("charged": false), every time
//	busyrefuse_...  busy_ for the first request, then refuse_ for every later one
//	droprefuse_...  drop_ for the first request, then refuse_ for every later one
//
// A fault of the kinds drop_ to busy_ hits the first request for a key only:
// its retry finds the charge made (or, for busy_, makes it) and gets a
// normal answer. refuse_ is a permanent refusal: the provider looks at the
// request before its idempotency key (validation, a rule, an account
// setting), as real providers do, so it refuses a retry even when the key
// has a charge. The last two make the case the service must not get wrong:
// a retry refused for good says nothing about the first attempt, and only
// the lookup by key does. Random faults hit any request, replays included. The ledger is the
// ground truth of what was charged, for tests in the same process and, over
// HTTP, in others.
package sandboxprovider

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// Fault is a way the provider misbehaves.
type Fault string

const (
	// FaultNone: the request is processed and answered normally.
	FaultNone Fault = ""
	// FaultNotCharged: 503 before charging, with "charged": false.
	FaultNotCharged Fault = "not_charged"
	// FaultDrop: the charge is made, then the connection is closed with no answer.
	FaultDrop Fault = "drop"
	// FaultBadGateway: the charge is made, then a gateway's 502 is the answer.
	FaultBadGateway Fault = "bad_gateway"
	// FaultSlow: the charge is made, and the answer comes after SlowDelay.
	FaultSlow Fault = "slow"
	// FaultBusy: 409 in progress, nothing charged.
	FaultBusy Fault = "busy"
	// FaultRefused: 422 invalid_request before the key is looked at, with
	// "charged": false; asking again gets the same.
	FaultRefused Fault = "refused"
)

// Faults lists every fault, in a fixed order (the order seeded draws use).
// FaultRefused is not drawn at random: a permanent refusal of a random
// request would fail the payments that load runs expect to be charged.
var Faults = []Fault{FaultNotCharged, FaultDrop, FaultBadGateway, FaultSlow, FaultBusy}

// prefixes map a reference's prefix to its deterministic behaviour: the
// fault of a key's first request, and the fault of every later one.
var prefixes = []struct {
	prefix       string
	first, later Fault
}{
	{"fail_", FaultNotCharged, FaultNotCharged},
	{"drop_", FaultDrop, FaultNone},
	{"gw502_", FaultBadGateway, FaultNone},
	{"slow_", FaultSlow, FaultNone},
	{"busy_", FaultBusy, FaultNone},
	{"refuse_", FaultRefused, FaultRefused},
	{"busyrefuse_", FaultBusy, FaultRefused},
	{"droprefuse_", FaultDrop, FaultRefused},
}

// DeclinePrefix makes a reference's charge declined.
const DeclinePrefix = "decline_"

// Config tunes a provider. The zero value answers at once, never fails at
// random, and makes slow answers wait 15 s.
type Config struct {
	// Latency is how long processing a new charge takes. While it runs,
	// another request with the same key is refused as in progress.
	Latency time.Duration
	// SlowDelay is how late a FaultSlow answer comes; zero means 15 s.
	SlowDelay time.Duration
	// FaultRates gives, per fault, the probability that a request whose
	// reference has no fault prefix meets that fault. They must sum to at
	// most 1.
	FaultRates map[Fault]float64
	// Seed seeds the random faults, so a run can be repeated.
	Seed uint64
}

// ChargeStatus is the provider's decision.
type ChargeStatus string

const (
	// StatusSucceeded: the charge was made.
	StatusSucceeded ChargeStatus = "succeeded"
	// StatusDeclined: the charge was refused, and that is final for the key.
	StatusDeclined ChargeStatus = "declined"
)

// Charge is one entry of the ledger: one idempotency key, decided once.
// Its JSON is the answer's fields and the request count, flat.
type Charge struct {
	ChargeAnswer
	// Requests counts every request that carried this key, the first included.
	Requests int `json:"requests"`
}

// ChargeAnswer is the body of a 200 answer: the charge as it was decided,
// byte for byte the same on every replay.
type ChargeAnswer struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Status         ChargeStatus    `json:"status"`
	Amount         decimal.Decimal `json:"amount"`
	Currency       string          `json:"currency"`
	Reference      string          `json:"reference"`
	Created        time.Time       `json:"created"`
}

// Counters count what the provider did, since it started.
type Counters struct {
	Requests           int           `json:"requests"`
	Charges            int           `json:"charges"`  // new succeeded charges: money moved
	Declines           int           `json:"declines"` // new declined charges
	Replays            int           `json:"replays"`  // a known key answered from the ledger
	ParamConflicts     int           `json:"paramConflicts"`
	InProgressRefusals int           `json:"inProgressRefusals"` // a second request while the first was processed
	Faults             map[Fault]int `json:"faults"`
}

// Ledger is a copy of the provider's state.
type Ledger struct {
	Charges  []Charge `json:"charges"`
	Counters Counters `json:"counters"`
}

// Succeeded returns the succeeded charges whose reference is ref: more than
// one would be a double charge (it cannot happen here: one key, one charge).
func (l Ledger) Succeeded(ref string) []Charge {
	var out []Charge
	for _, c := range l.Charges {
		if c.Reference == ref && c.Status == StatusSucceeded {
			out = append(out, c)
		}
	}
	return out
}

// chargeRequest is what a create call asks for.
type chargeRequest struct {
	Amount    decimal.Decimal
	Currency  string
	Reference string
}

func (r chargeRequest) sameAs(o chargeRequest) bool {
	return r.Amount.Equal(o.Amount) && r.Currency == o.Currency && r.Reference == o.Reference
}

// entry is one key's state: being processed, then decided.
type entry struct {
	req    chargeRequest
	charge *Charge // nil while processing
}

// Provider is the sandbox's state and logic, without HTTP (server.go serves it).
type Provider struct {
	cfg Config

	mu       sync.Mutex
	rng      *rand.Rand
	byKey    map[string]*entry
	byRef    map[string][]string // reference -> keys of its charges
	refused  map[string]bool     // keys a busy_ fault has already refused once
	nextID   int
	counters Counters
	now      func() time.Time
}

// New returns a provider with an empty ledger.
func New(cfg Config) *Provider {
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 15 * time.Second
	}
	return &Provider{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byKey:    map[string]*entry{},
		byRef:    map[string][]string{},
		refused:  map[string]bool{},
		counters: Counters{Faults: map[Fault]int{}},
		now:      time.Now,
	}
}

// Ledger returns a copy of the ledger, charges in the order they were made.
func (p *Provider) Ledger() Ledger {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := Ledger{Counters: p.countersLocked()}
	for _, e := range p.byKey {
		if e.charge != nil {
			l.Charges = append(l.Charges, *e.charge)
		}
	}
	sort.Slice(l.Charges, func(i, j int) bool { return l.Charges[i].ID < l.Charges[j].ID })
	return l
}

// Counters returns a copy of the counters alone: cheaper than Ledger for a
// test that checks them after every step of a long run.
func (p *Provider) Counters() Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.countersLocked()
}

// countersLocked copies the counters; p.mu is held.
func (p *Provider) countersLocked() Counters {
	c := p.counters
	c.Faults = maps.Clone(p.counters.Faults)
	return c
}

// ChargesFor returns every charge (succeeded or declined) made for a
// reference, under any idempotency key: more than one succeeded charge for
// a payment's reference is a double charge, whatever keys were used.
func (p *Provider) ChargesFor(reference string) []Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Charge
	for _, key := range p.byRef[reference] {
		out = append(out, *p.byKey[key].charge)
	}
	return out
}

// LookupResult is what the provider holds under a key.
type LookupResult int

const (
	// LookupNone: no charge was made under the key, and none is being made.
	LookupNone LookupResult = iota
	// LookupProcessing: the key's first request is being processed; it may
	// still charge.
	LookupProcessing
	// LookupCharged: the charge was decided (succeeded or declined).
	LookupCharged
)

// Lookup returns the charge made under key, if any.
func (p *Provider) Lookup(key string) (Charge, bool) {
	c, found := p.LookupState(key)
	return c, found == LookupCharged
}

// LookupState is Lookup for the API: a key whose request is still being
// processed is LookupProcessing, never "none", since that request may yet
// charge.
func (p *Provider) LookupState(key string) (Charge, LookupResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byKey[key]
	switch {
	case !ok:
		return Charge{}, LookupNone
	case e.charge == nil:
		return Charge{}, LookupProcessing
	default:
		return *e.charge, LookupCharged
	}
}

// admission is what begin decided for a request.
type admission int

const (
	admitNew        admission = iota // a new key: process it
	admitReplay                      // a decided key with the same parameters
	admitConflict                    // a known key with other parameters
	admitInProgress                  // the key's first request is still being processed (or a busy_ fault says so)
	admitRefused                     // a fault refuses the request before any charge (FaultNotCharged, FaultRefused)
)

// begin looks the key up, picks the fault this request meets, and for a
// new key marks it as being processed.
func (p *Provider) begin(key string, req chargeRequest) (admission, Fault, Charge) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counters.Requests++
	e, known := p.byKey[key]
	switch {
	case known && !e.req.sameAs(req):
		p.counters.ParamConflicts++
		return admitConflict, FaultNone, Charge{}
	case known && e.charge == nil:
		p.counters.InProgressRefusals++
		return admitInProgress, FaultNone, Charge{}
	}
	fault := p.faultFor(key, req.Reference, known)
	if fault != FaultNone {
		p.counters.Faults[fault]++
	}
	switch {
	case fault == FaultRefused:
		p.refused[key] = true
		return admitRefused, fault, Charge{}
	case fault == FaultBusy:
		// Refused as a provider refuses a key it is still processing.
		p.refused[key] = true
		return admitInProgress, fault, Charge{}
	case fault == FaultNotCharged:
		return admitRefused, fault, Charge{}
	case known:
		e.charge.Requests++
		p.counters.Replays++
		return admitReplay, fault, *e.charge
	}
	p.byKey[key] = &entry{req: req}
	return admitNew, fault, Charge{}
}

// decide makes the charge for a key admitted as new.
func (p *Provider) decide(key string, req chargeRequest) Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	status := StatusSucceeded
	if strings.HasPrefix(req.Reference, DeclinePrefix) {
		status = StatusDeclined
		p.counters.Declines++
	} else {
		p.counters.Charges++
	}
	p.nextID++
	c := &Charge{
		ChargeAnswer: ChargeAnswer{
			ID:             fmt.Sprintf("ch_%08d", p.nextID),
			IdempotencyKey: key,
			Status:         status,
			Amount:         req.Amount,
			Currency:       req.Currency,
			Reference:      req.Reference,
			Created:        p.now().UTC(),
		},
		Requests: 1,
	}
	p.byKey[key].charge = c
	p.byRef[req.Reference] = append(p.byRef[req.Reference], key)
	return *c
}

// faultFor picks the fault a request meets. A fault prefix gives the first
// request for a key its first fault, and every later one its later fault
// (a key is known once charged, refused once a busy_ or refuse_ fault has
// turned it away); a reference without one meets the random faults on every
// request, replays included, since a real network loses a replayed answer
// as easily as the first. Called with p.mu held.
func (p *Provider) faultFor(key, ref string, known bool) Fault {
	for _, pf := range prefixes {
		if !strings.HasPrefix(ref, pf.prefix) {
			continue
		}
		if known || p.refused[key] {
			return pf.later
		}
		return pf.first
	}
	if strings.HasPrefix(ref, DeclinePrefix) || len(p.cfg.FaultRates) == 0 {
		return FaultNone
	}
	draw := p.rng.Float64()
	for _, f := range Faults {
		if draw < p.cfg.FaultRates[f] {
			return f
		}
		draw -= p.cfg.FaultRates[f]
	}
	return FaultNone
}
