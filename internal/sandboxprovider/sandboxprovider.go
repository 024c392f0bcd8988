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
//	POST /v1/refunds                     refund (part of) a charge; Idempotency-Key header required
//	     {"charge":"<the charge's idempotency key>","amount":"10.00","currency":"RUB","reference":"re_1"}
//	GET  /v1/refunds?idempotency_key=K   look a refund up by its key (404 if none, 409 while processing)
//	POST /v1/authorizations              hold an amount for a later capture or void; Idempotency-Key header required
//	     {"amount":"100.50","currency":"RUB","reference":"pi_1"}
//	GET  /v1/authorizations?idempotency_key=K  look an authorization up, with its hold as it stands
//	POST /v1/captures                    take (part of) what an authorization holds; Idempotency-Key header required
//	     {"authorization":"<the authorization's idempotency key>","amount":"60.00","currency":"RUB","reference":"cp_1"}
//	GET  /v1/captures?idempotency_key=K  look a capture up by its key
//	POST /v1/voids                       release what an authorization holds; Idempotency-Key header required
//	     {"authorization":"<the authorization's idempotency key>","reference":"vo_1"}  (reference optional)
//	GET  /v1/voids?idempotency_key=K     look a void up by its key
//	GET  /v1/ledger                      every charge, refund, authorization, capture and void, and the counters, for tests
//	GET  /healthz                        200 while serving
//
// Errors are plain JSON: {"error":{"type":"...","message":"...","charged":false}}
// ("refunded", "authorized", "captured" or "voided": false for a refund,
// authorization, capture or void request). A lookup that finds nothing
// under the key answers 404 charge_not_found, refund_not_found,
// authorization_not_found, capture_not_found or void_not_found.
//
// A refund names its charge by the charge's idempotency key: the one name
// of a charge that its payer holds even when the charge's answer was lost
// (payment-service derives it, domain.Charge.ProviderIdempotencyKey). A
// refund is refused with 422 invalid_request, "refunded": false, and
// nothing recorded under its key, when its charge did not succeed (none,
// declined, or still being processed), is in another currency, or has
// less left to refund than asked: the succeeded refunds of a charge never
// add up to more than it charged.
//
// # Two-step payments
//
// An authorization is decided like a charge (declined for a decline_
// reference), and a succeeded one holds its amount until
// Config.AuthorizationTTL (SANDBOX_AUTHORIZATION_TTL, 7 days by default)
// has passed by the provider's clock (Config.Now): its answer says when
// (expiresAt). Its lookup adds where the hold stands: "hold" is active,
// captured (with "capture", the capture's key, and "captured", what it
// took), voided (with "void") or expired. A capture or a void names its
// authorization by the authorization's idempotency key, as a refund names
// its charge, and is refused with 422 invalid_request, "captured" (or
// "voided"): false, and nothing recorded under its key, unless the hold
// is active: the authorization succeeded, and was not captured, voided or
// left to lapse. A capture is refused too in another currency than the
// authorization's, or for more than it holds. At most one capture and one
// void of a hold succeed, and never both: each is checked when it is
// decided, under the lock every decision takes, so of a capture and a void
// processed at the same time exactly one succeeds, and a second capture
// under another key is refused. A succeeded capture ends the hold: a
// partial one releases the rest. A capture or a void is declined by a
// decline_ reference, which leaves the hold active.
//
// A void's reference is optional: one sent without it meets the faults
// (and the decline) of its authorization's reference, so a void whose
// client names none still meets the faults its payment asks for.
//
// A refund of a two-step payment names its capture: its "charge" field is
// the capture's idempotency key, and what it can give back is what the
// capture took. A refund that names an authorization is refused.
//
// A hold lapses when the provider notices its time has passed: at the
// first request of any kind at or after it, at the server's sweep (every
// Config.HoldSweep, a second by default), or at Provider.ExpireHolds; it
// is then counted (Expirations) and reported once, by an
// authorization.expired event.
//
// # Modifications received, decided later
//
// With Config.Modifications set to ModificationsReceived
// (SANDBOX_MODIFICATIONS=received), captures, refunds and voids are
// answered as Adyen answers them: 202 with the modification's id and
// status "received", the key's first answer on every later request; the
// decision is made Config.ModificationDelay later and announced only by
// an event (capture.succeeded, capture.declined, capture.failed, and the
// same for refund. and void.). A received modification fails ("failed",
// with a failureReason) when what would have refused it at once stands in
// the way when it is decided (no active hold, more than the charge has
// left), for a modfail_ reference, and at Config.ModificationFailureRate;
// a failure moves nothing. Its lookup answers the receipt until the
// decision, then the decision. Charges and authorizations are decided at
// once in either mode. Provider.DecideReceived decides every received
// modification at once, for tests.
//
// # Idempotency
//
// It keeps the idempotency promises real providers document, for every
// kind of request alike:
//
//   - the same key with the same parameters returns the first answer and
//     charges (or refunds) nothing new (Idempotent-Replayed: true);
//   - the same key with other parameters is refused with 422
//     idempotency_key_reused: never a second charge, never another amount;
//   - the same key while its first request is still being processed is
//     refused with 409 idempotency_request_in_progress.
//
// And it fails the way real providers fail, deterministically by the
// reference's prefix (so demos and tests can pick a fault) and, for any other
// reference, at seeded random rates (Config.FaultRates, for load and fault
// runs). Every other kind of request (a refund, an authorization, a
// capture, a void) meets the same faults by its own reference, through the
// same code; read "refunds" (and so on) for "charges" below:
//
//	decline_...  declined (a decision, recorded like an approval)
//	fail_...     503 before charging, saying so ("charged": false), every time
//	drop_...     charges, then drops the connection without an answer
//	gw502_...    charges, then answers 502 as a gateway would
//	slow_...     charges, then answers after Config.SlowDelay (longer than a client waits)
//	busy_...     refuses as "in progress" without charging
//	refuse_...   422 invalid_request before charging ("charged": false), every time
//	refuseonce_...  refuse_ for the first request only; later ones are processed
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
// the lookup by key does. refuseonce_ is a refusal that speaks for its own
// request only (a rule that changed, a limit that passed): a request sent
// earlier and still on its way is processed when it lands.
//
// # The request bound
//
// A request that carries the header Request-Sent-At (RFC 3339, set by
// internal/provider/sandbox) and arrives more than Config.MaxRequestAge
// after it, is refused before anything else, with 503 request_expired and
// "charged": false: the provider acts on a request only within that bound
// of its sending, so a request held on its way (a congested link, a
// stalled proxy) can never land late. The service relies on it
// (PROVIDER_MAX_REQUEST_AGE) before it calls a resumed charge FAILED. Random faults hit any request, replays included. The ledger is the
// ground truth of what was charged, held, captured, voided and refunded,
// for tests in the same process and, over HTTP, in others (NetCaptured
// adds up a two-step payment).
//
// # Webhooks
//
// With Config.Webhooks.URL set (SANDBOX_WEBHOOK_URL), every decision, and
// only a decision (a charge, refund, authorization, capture or void
// succeeded or declined, a received one failed; never a refusal), makes
// one event, and so does every hold that lapses; each is POSTed to that
// URL as JSON and signed with internal/webhooksig (header
// Sandbox-Signature):
//
//	{"id":"evt_...","type":"charge.succeeded","created":"<RFC 3339>","data":{...}}
//
// type is charge.succeeded, charge.declined, refund.succeeded,
// refund.declined, authorization.succeeded, authorization.declined,
// capture.succeeded, capture.declined, void.succeeded, void.declined,
// refund.failed, capture.failed, void.failed (received modifications
// only) or authorization.expired; data is the object exactly as the lookup by key
// answered it when the event was made (an authorization's with its hold:
// active on authorization.succeeded, expired on authorization.expired), so
// idempotencyKey names it as the payer knows it. An expired event's
// created is when the provider noticed the lapse; its data's expiresAt,
// when the hold lapsed. The
// event is queued when the decision is made, before the call's answer is
// written: a webhook may arrive before the answer, or instead of it.
// Delivery is at least once: any 2xx answer delivers it; anything else, or
// no answer within the attempt's timeout, is retried with capped
// exponential backoff and seeded jitter until Webhooks.RetryFor after the
// event was made. Every delivery of an event carries the same id and the
// same bytes, signed afresh. The queue is bounded; an event that finds it
// full is dropped and counted, like a lost one. The ledger's "webhooks"
// counts events made, deliveries, attempts, retries, expired, dropped and
// pending deliveries, and the faults.
//
// Webhook faults go by the reference too, by a second prefix that comes
// after the call's (or the decline_) prefix, or first when there is none:
//
//	hookdup_...   delivered twice, both at once, each retried until delivered
//	hookswap_...  held until the next event about the same charge has been
//	              sent (for a charge: its refund's; for an authorization:
//	              its capture's, void's or expiry's, or its capture's
//	              refund's), so the two arrive swapped; sent anyway after
//	              Webhooks.LateDelay
//	hooklate_...  first sent after Webhooks.LateDelay (longer than the
//	              service's completer interval)
//	hooklost_...  made and counted, never delivered
//
// So the two channels fail apart or together: drop_1 loses the call's
// answer and the webhook delivers it (the case webhooks exist for);
// drop_hooklost_1 loses both, and only a lookup by key (the service's
// retry or completer) finds the charge; decline_hookdup_1 is declined and
// its event delivered twice; hooklate_1 is answered at once and reported
// late. A reference without a webhook prefix meets the webhook faults at
// the seeded rates of Webhooks.FaultRates (SANDBOX_WEBHOOK_FAULT_RATES),
// drawn from a stream of the seed apart from the calls', so turning
// webhooks on changes no call's fault.
package sandboxprovider

import (
	"math/rand/v2"
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
	{"refuseonce_", FaultRefused, FaultNone},
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
	// MaxRequestAge, when set, refuses a request that arrives more than
	// this long after its Request-Sent-At (see "The request bound").
	MaxRequestAge time.Duration
	// FaultRates gives, per fault, the probability that a request whose
	// reference has no fault prefix meets that fault. They must sum to at
	// most 1.
	FaultRates map[Fault]float64
	// Seed seeds the random faults, so a run can be repeated.
	Seed uint64
	// Webhooks, when Webhooks.URL is set, reports every decision to that
	// URL as a signed event (webhooks.go).
	Webhooks WebhookConfig
	// AuthorizationTTL is how long an authorization's hold lasts, by the
	// provider's clock; zero means 168 h (7 days).
	AuthorizationTTL time.Duration
	// HoldSweep is how often a server looks for holds that lapsed, so that
	// each is reported (authorization.expired) without waiting for a
	// request; zero means every second, a negative value never (a lapse is
	// then noticed by the next request, or by Provider.ExpireHolds).
	HoldSweep time.Duration
	// Balance is the fee of a charge and the payouts (balance.go).
	Balance BalanceConfig
	// Now is the provider's clock: the decisions' times, the holds' lapses
	// and the request bound go by it. Nil means time.Now; a test sets its
	// own to make a hold lapse without waiting for it.
	Now func() time.Time
	// Modifications is how captures, refunds and voids are answered
	// (modifications.go): at once (the zero value), or received and
	// decided later, as Adyen does.
	Modifications ModificationMode
	// ModificationDelay is how long after its receipt a received
	// modification is decided; zero means 1 s.
	ModificationDelay time.Duration
	// ModificationFailureRate is the probability that a received
	// modification whose reference asks for no outcome (decline_,
	// modfail_) fails when it is decided, drawn from a stream of the seed
	// apart from the calls' faults.
	ModificationFailureRate float64
}

// ChargeStatus is the provider's decision on a charge or a refund.
type ChargeStatus string

const (
	// StatusSucceeded: the charge (or refund) was made.
	StatusSucceeded ChargeStatus = "succeeded"
	// StatusDeclined: the charge (or refund) was refused, and that is final
	// for the key.
	StatusDeclined ChargeStatus = "declined"
	// StatusReceived: a modification in the received mode, not decided yet
	// (the 202's answer, and its lookup's until the decision).
	StatusReceived ChargeStatus = "received"
	// StatusFailed: a received modification that could not be made (the
	// hold was gone, the capture had less left to refund, a failure drawn
	// or asked for by its reference): nothing was moved, and that is final
	// for the key.
	StatusFailed ChargeStatus = "failed"
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
	Decision
}

// Decision is what every decided answer says, a charge's or a refund's:
// its JSON is flat in the answer.
type Decision struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	Status         ChargeStatus    `json:"status"`
	Amount         decimal.Decimal `json:"amount"`
	Currency       string          `json:"currency"`
	Reference      string          `json:"reference"`
	Created        time.Time       `json:"created"`
	// FailureReason says why a received modification failed; absent
	// otherwise.
	FailureReason string `json:"failureReason,omitempty"`
}

// Refund is one refund of the ledger: one idempotency key, decided once.
type Refund struct {
	RefundAnswer
	// Requests counts every request that carried this key, the first included.
	Requests int `json:"requests"`
}

// RefundAnswer is the body of a refund's 200 answer, the same on every
// replay.
type RefundAnswer struct {
	Decision
	// Charge is the idempotency key of the charge refunded.
	Charge string `json:"charge"`
}

// KeyCounters count the idempotency machinery's work for one kind of
// request, the same for charges and refunds. Their JSON is flat in the
// kind's counters.
type KeyCounters struct {
	Requests           int           `json:"requests"`
	Replays            int           `json:"replays"` // a known key answered from the ledger
	ParamConflicts     int           `json:"paramConflicts"`
	InProgressRefusals int           `json:"inProgressRefusals"` // a second request while the first was processed
	Expired            int           `json:"expired"`            // refused as older than MaxRequestAge, before anything else
	Faults             map[Fault]int `json:"faults"`
}

// Counters count what the provider did with charges, since it started.
type Counters struct {
	KeyCounters
	Charges  int `json:"charges"`  // new succeeded charges: money moved
	Declines int `json:"declines"` // new declined charges
}

// RefundCounters count what the provider did with refunds, since it
// started.
type RefundCounters struct {
	KeyCounters
	ReceivedCounters
	Refunds  int `json:"refunds"`  // new succeeded refunds: money moved back
	Declines int `json:"declines"` // new declined refunds
	// Refusals: refunds refused before anything was recorded, because they
	// went beyond what their charge has left, or their charge cannot be
	// refunded.
	Refusals int `json:"refusals"`
}

// Ledger is a copy of the provider's state.
type Ledger struct {
	Charges               []Charge              `json:"charges"`
	Refunds               []Refund              `json:"refunds"`
	Authorizations        []Authorization       `json:"authorizations"`
	Captures              []Capture             `json:"captures"`
	Voids                 []Void                `json:"voids"`
	Counters              Counters              `json:"counters"`
	RefundCounters        RefundCounters        `json:"refundCounters"`
	AuthorizationCounters AuthorizationCounters `json:"authorizationCounters"`
	CaptureCounters       CaptureCounters       `json:"captureCounters"`
	VoidCounters          VoidCounters          `json:"voidCounters"`
	Webhooks              WebhookCounters       `json:"webhooks"`
	// Undecided counts the received modifications not decided yet
	// (modifications.go): they are in none of the lists above.
	Undecided int `json:"undecided"`
}

// Succeeded returns the succeeded charges whose reference is ref: more than
// one would be a double charge (it cannot happen here: one key, one charge).
func (l Ledger) Succeeded(ref string) []Charge {
	return where(l.Charges, func(c Charge) bool { return c.Reference == ref && c.Status == StatusSucceeded })
}

// SucceededRefunds returns the succeeded refunds whose own reference is
// ref: more than one would be a double refund.
func (l Ledger) SucceededRefunds(ref string) []Refund {
	return where(l.Refunds, func(r Refund) bool { return r.Reference == ref && r.Status == StatusSucceeded })
}

// where returns the items that keep holds for, in order.
func where[T any](items []T, keep func(T) bool) []T {
	var out []T
	for _, item := range items {
		if keep(item) {
			out = append(out, item)
		}
	}
	return out
}

// Refunded returns the succeeded refunds of the charges whose reference is
// chargeRef, and their total: the money given back for that payment.
func (l Ledger) Refunded(chargeRef string) ([]Refund, decimal.Decimal) {
	keys := map[string]bool{}
	for _, c := range l.Charges {
		if c.Reference == chargeRef {
			keys[c.IdempotencyKey] = true
		}
	}
	out := where(l.Refunds, func(r Refund) bool { return keys[r.Charge] && r.Status == StatusSucceeded })
	total := decimal.Zero
	for _, r := range out {
		total = total.Add(r.Amount)
	}
	return out, total
}

// Provider is the sandbox's state and logic, without HTTP (server.go serves it).
type Provider struct {
	cfg Config

	mu             sync.Mutex
	rng            *rand.Rand
	counters       Counters
	refundCounters RefundCounters
	charges        *book[chargeRequest, ChargeAnswer]
	refunds        *book[refundRequest, RefundAnswer]

	authorizationCounters AuthorizationCounters
	captureCounters       CaptureCounters
	voidCounters          VoidCounters
	authorizations        *book[chargeRequest, AuthorizationAnswer]
	captures              *book[captureRequest, CaptureAnswer]
	voids                 *book[voidRequest, VoidAnswer]
	// holds are the holds of the succeeded authorizations, by key; lapsing
	// orders them by when they lapse.
	holds   map[string]*hold
	lapsing holdQueue

	now func() time.Time
	// balance is the money the decisions moved (balance.go).
	balance *balance
	// webhooks is nil when the provider sends none.
	webhooks *webhookSender
	// pending are the received modifications waiting for their decision
	// (modifications.go).
	pending pendingDecisions
}

// New returns a provider with an empty ledger.
func New(cfg Config) *Provider {
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = 15 * time.Second
	}
	if cfg.AuthorizationTTL == 0 {
		cfg.AuthorizationTTL = 168 * time.Hour
	}
	if cfg.HoldSweep == 0 {
		cfg.HoldSweep = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ModificationDelay == 0 {
		cfg.ModificationDelay = time.Second
	}
	p := &Provider{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now:      cfg.Now,
		webhooks: newWebhookSender(cfg.Webhooks, cfg.Seed),
		holds:    map[string]*hold{},
		pending:  newPendingDecisions(cfg.Seed),
	}
	p.charges = newBook[chargeRequest, ChargeAnswer](&p.counters.KeyCounters)
	p.refunds = newBook[refundRequest, RefundAnswer](&p.refundCounters.KeyCounters)
	p.authorizations = newBook[chargeRequest, AuthorizationAnswer](&p.authorizationCounters.KeyCounters)
	p.captures = newBook[captureRequest, CaptureAnswer](&p.captureCounters.KeyCounters)
	p.voids = newBook[voidRequest, VoidAnswer](&p.voidCounters.KeyCounters)
	p.balance = newBalance(p)
	return p
}

func chargeOf(a ChargeAnswer, requests int) Charge {
	return Charge{ChargeAnswer: a, Requests: requests}
}
func refundOf(a RefundAnswer, requests int) Refund {
	return Refund{RefundAnswer: a, Requests: requests}
}

// Ledger returns a copy of the ledger, each kind in the order it was
// made, the holds as they stand now (a lapse is noticed first).
func (p *Provider) Ledger() Ledger {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	return Ledger{
		Charges:               decided(p.charges, chargeOf, func(c Charge) string { return c.ID }),
		Refunds:               decided(p.refunds, refundOf, func(r Refund) string { return r.ID }),
		Authorizations:        p.authorizationsLocked(),
		Captures:              decided(p.captures, captureOf, func(c Capture) string { return c.ID }),
		Voids:                 decided(p.voids, voidOf, func(v Void) string { return v.ID }),
		Counters:              p.countersLocked(),
		RefundCounters:        p.refundCountersLocked(),
		AuthorizationCounters: p.authorizationCountersLocked(),
		CaptureCounters:       p.captureCountersLocked(),
		VoidCounters:          p.voidCountersLocked(),
		Webhooks:              p.webhooks.counters(),
		Undecided:             len(p.pending.timers),
	}
}

// WebhookCounters returns a copy of the webhooks' counters.
func (p *Provider) WebhookCounters() WebhookCounters { return p.webhooks.counters() }

// Counters returns a copy of the charges' counters alone: cheaper than
// Ledger for a test that checks them after every step of a long run.
func (p *Provider) Counters() Counters { return locked(p, p.countersLocked) }

// RefundCounters returns a copy of the refunds' counters.
func (p *Provider) RefundCounters() RefundCounters { return locked(p, p.refundCountersLocked) }

// locked returns f's result, computed with p.mu held.
func locked[T any](p *Provider, f func() T) T {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f()
}

// countersLocked copies the charges' counters; p.mu is held.
func (p *Provider) countersLocked() Counters {
	c := p.counters
	c.KeyCounters = copyCounts(c.KeyCounters)
	return c
}

// refundCountersLocked copies the refunds' counters; p.mu is held.
func (p *Provider) refundCountersLocked() RefundCounters {
	c := p.refundCounters
	c.KeyCounters = copyCounts(c.KeyCounters)
	return c
}

// ChargesFor returns every charge (succeeded or declined) made for a
// reference, under any idempotency key: more than one succeeded charge for
// a payment's reference is a double charge, whatever keys were used.
func (p *Provider) ChargesFor(reference string) []Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	return byReference(p.charges, reference, chargeOf)
}

// RefundsFor returns every refund (succeeded or declined) of the charges
// made for chargeRef, under any key: the provider's truth of what was
// refunded for a payment's reference.
func (p *Provider) RefundsFor(chargeRef string) []Refund {
	p.mu.Lock()
	defer p.mu.Unlock()
	charges := map[string]bool{}
	for _, key := range p.charges.byRef[chargeRef] {
		charges[key] = true
	}
	return where(decided(p.refunds, refundOf, func(r Refund) string { return r.ID }), func(r Refund) bool { return charges[r.Charge] })
}

// LookupResult is what the provider holds under a key.
type LookupResult int

const (
	// LookupNone: nothing was decided under the key, and nothing is being
	// processed.
	LookupNone LookupResult = iota
	// LookupProcessing: the key's first request is being processed; it may
	// still charge (or refund).
	LookupProcessing
	// LookupCharged: the charge (or refund) was decided (succeeded or
	// declined).
	LookupCharged
	// LookupReceived: a modification in the received mode was received
	// and is not decided yet; its lookup answers the receipt.
	LookupReceived
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
	a, requests, found := p.charges.lookup(key)
	return chargeOf(a, requests), found
}

// LookupRefund returns the refund made under key, if any.
func (p *Provider) LookupRefund(key string) (Refund, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, requests, found := p.refunds.lookup(key)
	return refundOf(a, requests), found == LookupCharged
}

// chargeRequest is what a charge's create call asks for, and the part of
// a refund's that every kind has.
type chargeRequest struct {
	Amount    decimal.Decimal
	Currency  string
	Reference string
}

func (r chargeRequest) sameAs(o chargeRequest) bool {
	return r.Amount.Equal(o.Amount) && r.Currency == o.Currency && r.Reference == o.Reference
}

func (r chargeRequest) fields() chargeRequest { return r }

// decideCharge makes the charge for a key admitted as new. Called with
// p.mu held.
func (p *Provider) decideCharge(key string, req chargeRequest) (ChargeAnswer, error) {
	a := ChargeAnswer{Decision: p.charges.decide(key, req, "ch_", &p.counters.Charges, &p.counters.Declines, p.now())}
	p.charges.record(key, a)
	p.webhooks.made("charge", a.Decision, a, key)
	return a, nil
}
