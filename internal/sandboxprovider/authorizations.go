package sandboxprovider

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// HoldState is where the hold of a succeeded authorization stands.
type HoldState string

const (
	// HoldActive: the money is held; it may be captured or voided.
	HoldActive HoldState = "active"
	// HoldCaptured: a capture took (part of) it; the rest was released.
	HoldCaptured HoldState = "captured"
	// HoldVoided: a void released it.
	HoldVoided HoldState = "voided"
	// HoldExpired: the hold lapsed, AuthorizationTTL after it was made;
	// nothing can be captured or voided any more.
	HoldExpired HoldState = "expired"
)

// AuthorizationAnswer is the body of an authorization's 200 answer: the
// authorization as it was decided, byte for byte the same on every replay.
// Where its hold stands now is the lookup's (AuthorizationState).
type AuthorizationAnswer struct {
	Decision
	// ExpiresAt is when the hold lapses, by the provider's clock; absent
	// for a declined authorization, which holds nothing.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// AuthorizationState is what the lookup of an authorization answers, and
// what its events carry: the authorization as decided, and where its hold
// stands.
type AuthorizationState struct {
	AuthorizationAnswer
	// Hold is active, captured, voided or expired; absent for a declined
	// authorization.
	Hold HoldState `json:"hold,omitempty"`
	// Capture is the idempotency key of the capture that took the hold,
	// Captured what it took; Void the key of the void that released it.
	Capture  string          `json:"capture,omitempty"`
	Captured decimal.Decimal `json:"captured,omitzero"`
	Void     string          `json:"void,omitempty"`
}

// Authorization is one authorization of the ledger: one idempotency key,
// decided once, and its hold now.
type Authorization struct {
	AuthorizationState
	// Requests counts every request that carried this key, the first included.
	Requests int `json:"requests"`
}

// AuthorizationCounters count what the provider did with authorizations,
// since it started.
type AuthorizationCounters struct {
	KeyCounters
	Authorizations int `json:"authorizations"` // new succeeded authorizations: money held
	Declines       int `json:"declines"`       // new declined authorizations
	Expirations    int `json:"expirations"`    // holds that lapsed while active
}

// hold is the changing part of a succeeded authorization: its answer is
// fixed once decided, its hold is not.
type hold struct {
	key       string // the authorization's idempotency key
	state     HoldState
	expiresAt time.Time
	capture   string
	captured  decimal.Decimal
	void      string
}

// decideAuthorization makes the authorization for a key admitted as new:
// declined for a decline_ reference, or succeeded with a hold that lapses
// AuthorizationTTL later. Called with p.mu held.
func (p *Provider) decideAuthorization(key string, req chargeRequest) (AuthorizationAnswer, error) {
	c := &p.authorizationCounters
	a := AuthorizationAnswer{Decision: p.authorizations.decide(key, req, "au_", &c.Authorizations, &c.Declines, p.now())}
	if a.Status == StatusSucceeded {
		a.ExpiresAt = a.Created.Add(p.cfg.AuthorizationTTL)
		h := &hold{key: key, state: HoldActive, expiresAt: a.ExpiresAt}
		p.holds[key] = h
		heap.Push(&p.lapsing, h)
	}
	p.authorizations.record(key, a)
	p.webhooks.made("authorization", a.Decision, p.authorizationState(key, a), key)
	return a, nil
}

// authorizationState is the authorization decided under key with its hold
// now. Called with p.mu held.
func (p *Provider) authorizationState(key string, a AuthorizationAnswer) AuthorizationState {
	s := AuthorizationState{AuthorizationAnswer: a}
	if h := p.holds[key]; h != nil {
		s.Hold, s.Capture, s.Captured, s.Void = h.state, h.capture, h.captured, h.void
	}
	return s
}

// authorizationView is the lookup's answer for a decided authorization.
func authorizationView(p *Provider, key string, a AuthorizationAnswer) any {
	return p.authorizationState(key, a)
}

// activeHoldLocked returns the authorization under key and its hold, or
// why nothing can be taken from or released of it: no succeeded
// authorization, or a hold no longer active. Called with p.mu held, after
// expireLocked.
func (p *Provider) activeHoldLocked(key string) (AuthorizationAnswer, *hold, string) {
	a, _, found := p.authorizations.lookup(key)
	switch {
	case found == LookupNone:
		return a, nil, "no authorization was made under idempotency key " + key
	case found == LookupProcessing:
		return a, nil, "the authorization under idempotency key " + key + " is still being processed"
	case a.Status != StatusSucceeded:
		return a, nil, "the authorization under idempotency key " + key + " was declined: it holds nothing"
	}
	h := p.holds[key]
	switch h.state {
	case HoldCaptured:
		return a, nil, "the hold was captured already, under idempotency key " + h.capture
	case HoldVoided:
		return a, nil, "the hold was voided, under idempotency key " + h.void
	case HoldExpired:
		return a, nil, fmt.Sprintf("the hold lapsed at %s", h.expiresAt.UTC().Format(time.RFC3339))
	}
	return a, h, ""
}

// expireLocked marks expired every active hold whose time has come by the
// provider's clock, counts it and reports it (authorization.expired), and
// returns how many it marked. Every request calls it first, so a lapse is
// noticed, and reported once, by the first request, sweep or ExpireHolds
// at or after it. Called with p.mu held.
func (p *Provider) expireLocked() int {
	now := p.now()
	n := 0
	for len(p.lapsing) > 0 && !now.Before(p.lapsing[0].expiresAt) {
		h := heap.Pop(&p.lapsing).(*hold)
		if h.state != HoldActive {
			continue // captured or voided before it lapsed
		}
		h.state = HoldExpired
		p.authorizationCounters.Expirations++
		n++
		a, _, _ := p.authorizations.lookup(h.key)
		p.webhooks.send("authorization.expired", now.UTC(), a.Reference, p.authorizationState(h.key, a), h.key)
	}
	return n
}

// ExpireHolds marks expired the active holds whose time has come by the
// provider's clock, reports each with an authorization.expired event, and
// returns how many there were. Every request does the same first, and a
// server does it every Config.HoldSweep: a test with a clock of its own
// calls it to have a lapse noticed at once.
func (p *Provider) ExpireHolds() int { return locked(p, p.expireLocked) }

// holdQueue is a heap of holds, the earliest to lapse first. A hold
// captured or voided stays in it until its time, and is skipped then.
type holdQueue []*hold

func (q holdQueue) Len() int           { return len(q) }
func (q holdQueue) Less(i, j int) bool { return q[i].expiresAt.Before(q[j].expiresAt) }
func (q holdQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *holdQueue) Push(x any)        { *q = append(*q, x.(*hold)) }
func (q *holdQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return h
}
