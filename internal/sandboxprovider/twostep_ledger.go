package sandboxprovider

import (
	"fmt"

	"github.com/shopspring/decimal"
)

// The ledger of two-step payments: authorizations with their holds,
// captures and voids, and what tests read of them.

func captureOf(a CaptureAnswer, requests int) Capture {
	return Capture{CaptureAnswer: a, Requests: requests}
}
func voidOf(a VoidAnswer, requests int) Void { return Void{VoidAnswer: a, Requests: requests} }

// authorizationOf is the ledger's entry of an authorization, its hold as
// it stands. Called with p.mu held.
func (p *Provider) authorizationOf(a AuthorizationAnswer, requests int) Authorization {
	return Authorization{AuthorizationState: p.authorizationState(a.IdempotencyKey, a), Requests: requests}
}

// authorizationsLocked returns every decided authorization, sorted by id.
// Called with p.mu held.
func (p *Provider) authorizationsLocked() []Authorization {
	return decided(p.authorizations, p.authorizationOf, func(a Authorization) string { return a.ID })
}

// AuthorizationCounters returns a copy of the authorizations' counters.
func (p *Provider) AuthorizationCounters() AuthorizationCounters {
	return locked(p, p.authorizationCountersLocked)
}

// CaptureCounters returns a copy of the captures' counters.
func (p *Provider) CaptureCounters() CaptureCounters { return locked(p, p.captureCountersLocked) }

// VoidCounters returns a copy of the voids' counters.
func (p *Provider) VoidCounters() VoidCounters { return locked(p, p.voidCountersLocked) }

func (p *Provider) authorizationCountersLocked() AuthorizationCounters {
	c := p.authorizationCounters
	c.KeyCounters = copyCounts(c.KeyCounters)
	return c
}

func (p *Provider) captureCountersLocked() CaptureCounters {
	c := p.captureCounters
	c.KeyCounters = copyCounts(c.KeyCounters)
	return c
}

func (p *Provider) voidCountersLocked() VoidCounters {
	c := p.voidCounters
	c.KeyCounters = copyCounts(c.KeyCounters)
	return c
}

// AuthorizationsFor returns every authorization (succeeded or declined)
// made for a reference, under any key, its hold as it stands now: more
// than one succeeded authorization for a payment's reference holds its
// money twice.
func (p *Provider) AuthorizationsFor(reference string) []Authorization {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	return byReference(p.authorizations, reference, p.authorizationOf)
}

// CapturesFor returns every capture (succeeded or declined) of the
// authorization made under authorizationKey, in the order they were made:
// the provider never lets more than one succeed.
func (p *Provider) CapturesFor(authorizationKey string) []Capture {
	p.mu.Lock()
	defer p.mu.Unlock()
	return where(decided(p.captures, captureOf, func(c Capture) string { return c.ID }),
		func(c Capture) bool { return c.Authorization == authorizationKey })
}

// VoidsFor returns every void (succeeded or declined) of the authorization
// made under authorizationKey, in the order they were made.
func (p *Provider) VoidsFor(authorizationKey string) []Void {
	p.mu.Lock()
	defer p.mu.Unlock()
	return where(decided(p.voids, voidOf, func(v Void) string { return v.ID }),
		func(v Void) bool { return v.Authorization == authorizationKey })
}

// LookupAuthorization returns the authorization made under key, if any,
// its hold as it stands now.
func (p *Provider) LookupAuthorization(key string) (Authorization, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	a, requests, found := p.authorizations.lookup(key)
	return p.authorizationOf(a, requests), found == LookupCharged
}

// LookupCapture returns the capture made under key, if any.
func (p *Provider) LookupCapture(key string) (Capture, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, requests, found := p.captures.lookup(key)
	return captureOf(a, requests), found == LookupCharged
}

// LookupVoid returns the void made under key, if any.
func (p *Provider) LookupVoid(key string) (Void, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, requests, found := p.voids.lookup(key)
	return voidOf(a, requests), found == LookupCharged
}

// NetCaptured is Ledger.NetCaptured on the provider's ledger now.
func (p *Provider) NetCaptured(reference string) NetCapture { return p.Ledger().NetCaptured(reference) }

// SucceededAuthorizations returns the succeeded authorizations whose
// reference is ref: more than one holds a payment's money twice.
func (l Ledger) SucceededAuthorizations(ref string) []Authorization {
	return where(l.Authorizations, func(a Authorization) bool { return a.Reference == ref && a.Status == StatusSucceeded })
}

// SucceededCaptures returns the succeeded captures whose own reference is
// ref.
func (l Ledger) SucceededCaptures(ref string) []Capture {
	return where(l.Captures, func(c Capture) bool { return c.Reference == ref && c.Status == StatusSucceeded })
}

// SucceededVoids returns the succeeded voids whose own reference is ref
// (empty for the voids sent without one).
func (l Ledger) SucceededVoids(ref string) []Void {
	return where(l.Voids, func(v Void) bool { return v.Reference == ref && v.Status == StatusSucceeded })
}

// NetCapture is what a two-step payment moved at the provider: its
// succeeded authorizations, their succeeded captures, and the succeeded
// refunds of those captures, under any keys.
type NetCapture struct {
	// Authorizations counts the succeeded authorizations of the
	// reference, Authorized totals their amounts.
	Authorizations int             `json:"authorizations"`
	Authorized     decimal.Decimal `json:"authorized"`
	// Captures counts their succeeded captures, Captured totals them.
	Captures int             `json:"captures"`
	Captured decimal.Decimal `json:"captured"`
	// Voids counts their succeeded voids.
	Voids int `json:"voids"`
	// Refunded totals the succeeded refunds of those captures.
	Refunded decimal.Decimal `json:"refunded"`
	// Net is Captured less Refunded: the money the payer gave for good.
	Net decimal.Decimal `json:"net"`
	// Violations names every authorization captured more than once, above
	// its amount or in another currency, both captured and voided, or
	// voided twice, and every capture refunded above its amount. The
	// provider refuses each of them, so it stays empty; a test asserts so.
	Violations []string `json:"violations,omitempty"`
}

// NetCaptured adds up what the authorizations made for reference held,
// captured and had refunded, and checks each against its bound: never
// captured above the authorization, never refunded above the capture.
func (l Ledger) NetCaptured(reference string) NetCapture {
	n := NetCapture{Authorized: decimal.Zero, Captured: decimal.Zero, Refunded: decimal.Zero}
	type taken struct {
		auth            Authorization
		captured        decimal.Decimal
		captures, voids int
	}
	auths := map[string]*taken{}
	for _, a := range l.SucceededAuthorizations(reference) {
		n.Authorizations++
		n.Authorized = n.Authorized.Add(a.Amount)
		auths[a.IdempotencyKey] = &taken{auth: a, captured: decimal.Zero}
	}
	type refunded struct {
		capture Capture
		total   decimal.Decimal
	}
	captures := map[string]*refunded{}
	for _, c := range l.Captures {
		t, ok := auths[c.Authorization]
		if !ok || c.Status != StatusSucceeded {
			continue
		}
		n.Captures++
		n.Captured = n.Captured.Add(c.Amount)
		t.captures++
		t.captured = t.captured.Add(c.Amount)
		if c.Currency != t.auth.Currency {
			n.Violations = append(n.Violations, fmt.Sprintf("capture %s is in %s, its authorization %s in %s", c.IdempotencyKey, c.Currency, c.Authorization, t.auth.Currency))
		}
		captures[c.IdempotencyKey] = &refunded{capture: c, total: decimal.Zero}
	}
	for _, v := range l.Voids {
		if t, ok := auths[v.Authorization]; ok && v.Status == StatusSucceeded {
			n.Voids++
			t.voids++
		}
	}
	for _, r := range l.Refunds {
		if c, ok := captures[r.Charge]; ok && r.Status == StatusSucceeded {
			n.Refunded = n.Refunded.Add(r.Amount)
			c.total = c.total.Add(r.Amount)
		}
	}
	for _, a := range l.SucceededAuthorizations(reference) {
		t := auths[a.IdempotencyKey]
		switch {
		case t.captures > 1:
			n.Violations = append(n.Violations, fmt.Sprintf("authorization %s captured %d times", a.IdempotencyKey, t.captures))
		case t.captured.GreaterThan(a.Amount):
			n.Violations = append(n.Violations, fmt.Sprintf("authorization %s of %s captured %s", a.IdempotencyKey, a.Amount, t.captured))
		}
		switch {
		case t.voids > 1:
			n.Violations = append(n.Violations, fmt.Sprintf("authorization %s voided %d times", a.IdempotencyKey, t.voids))
		case t.voids > 0 && t.captures > 0:
			n.Violations = append(n.Violations, fmt.Sprintf("authorization %s both captured and voided", a.IdempotencyKey))
		}
	}
	for _, c := range l.Captures {
		if r, ok := captures[c.IdempotencyKey]; ok && r.total.GreaterThan(c.Amount) {
			n.Violations = append(n.Violations, fmt.Sprintf("capture %s of %s refunded %s", c.IdempotencyKey, c.Amount, r.total))
		}
	}
	n.Net = n.Captured.Sub(n.Refunded)
	return n
}
