package sandboxprovider

import (
	"errors"
	"fmt"
)

// captureRequest is what a capture's create call asks for: Amount of the
// money held by the authorization made under the idempotency key
// Authorization.
type captureRequest struct {
	chargeRequest
	Authorization string
}

func (r captureRequest) sameAs(o captureRequest) bool {
	return r.Authorization == o.Authorization && r.chargeRequest.sameAs(o.chargeRequest)
}

// voidRequest is what a void's create call asks for: the release of the
// hold of the authorization made under Authorization. Its reference is
// optional; inherited is its authorization's, which the void's faults and
// decline go by when it has none of its own.
type voidRequest struct {
	Authorization string
	Reference     string
	inherited     string
}

// sameAs compares what the requests say: inherited follows from
// Authorization.
func (r voidRequest) sameAs(o voidRequest) bool {
	return r.Authorization == o.Authorization && r.Reference == o.Reference
}

// fields are a void's reference (its own, or else its authorization's),
// for its faults and decline; a void names no amount.
func (r voidRequest) fields() chargeRequest {
	ref := r.Reference
	if ref == "" {
		ref = r.inherited
	}
	return chargeRequest{Reference: ref}
}

// bindVoid gives a void without a reference its authorization's, before
// its key is looked at: so a void that the client cannot name meets the
// faults its payment's reference asks for. Called with p.mu held.
func (p *Provider) bindVoid(req voidRequest) voidRequest {
	if e, ok := p.authorizations.byKey[req.Authorization]; ok {
		req.inherited = e.req.Reference
	}
	return req
}

// CaptureAnswer is the body of a capture's 200 answer, the same on every
// replay.
type CaptureAnswer struct {
	Decision
	// Authorization is the idempotency key of the authorization captured.
	Authorization string `json:"authorization"`
}

// Capture is one capture of the ledger: one idempotency key, decided once.
type Capture struct {
	CaptureAnswer
	// Requests counts every request that carried this key, the first included.
	Requests int `json:"requests"`
}

// VoidAnswer is the body of a void's 200 answer, the same on every
// replay: its amount and currency are what the authorization held (what a
// succeeded void released), its reference the void's own, empty when it
// was sent none.
type VoidAnswer struct {
	Decision
	// Authorization is the idempotency key of the authorization voided.
	Authorization string `json:"authorization"`
}

// Void is one void of the ledger: one idempotency key, decided once.
type Void struct {
	VoidAnswer
	// Requests counts every request that carried this key, the first included.
	Requests int `json:"requests"`
}

// CaptureCounters count what the provider did with captures, since it
// started.
type CaptureCounters struct {
	KeyCounters
	ReceivedCounters
	Captures int `json:"captures"` // new succeeded captures: money taken
	Declines int `json:"declines"` // new declined captures
	// Refusals: captures refused before anything was recorded: no active
	// hold, another currency, or more than the authorization holds.
	Refusals int `json:"refusals"`
}

// VoidCounters count what the provider did with voids, since it started.
type VoidCounters struct {
	KeyCounters
	ReceivedCounters
	Voids    int `json:"voids"`    // new succeeded voids: holds released
	Declines int `json:"declines"` // new declined voids
	// Refusals: voids refused before anything was recorded: no active hold.
	Refusals int `json:"refusals"`
}

// errCaptureRefused and errVoidRefused: the capture (void) cannot be made,
// whatever the key; nothing is recorded under it, as for a refuse_ fault.
var (
	errCaptureRefused = errors.New("capture refused")
	errVoidRefused    = errors.New("void refused")
)

// decideCapture makes the capture for a key admitted as new. Its
// authorization's hold must be active (succeeded, not captured, voided or
// lapsed), in the capture's currency, and hold at least its amount;
// otherwise it is refused and the key is forgotten. Checked here, when the
// capture is decided, under the lock that every decision takes: of two
// captures, or a capture and a void, of one hold processed at the same
// time, the first decided takes it and the other is refused. A succeeded
// capture ends the hold: a partial one releases the rest. Declined for a
// decline_ reference, like a charge; the hold then stays active. Called
// with p.mu held.
func (p *Provider) decideCapture(key string, req captureRequest) (CaptureAnswer, error) {
	if refusal := p.captureRefusal(req); refusal != "" {
		p.captures.forget(key)
		p.captureCounters.Refusals++
		return CaptureAnswer{}, fmt.Errorf("%w: %s; nothing was captured", errCaptureRefused, refusal)
	}
	c := &p.captureCounters
	return p.commitCapture(key, req, p.captures.decide(key, req, "cp_", &c.Captures, &c.Declines, p.now())), nil
}

// captureRefusal says why req cannot be captured now: its authorization's
// hold is not active, is in another currency, or holds less; "" when it
// can. Called with p.mu held.
func (p *Provider) captureRefusal(req captureRequest) string {
	p.expireLocked()
	auth, _, refusal := p.activeHoldLocked(req.Authorization)
	switch {
	case refusal != "":
		return refusal
	case auth.Currency != req.Currency:
		return fmt.Sprintf("the authorization is in %s, not %s", auth.Currency, req.Currency)
	case req.Amount.GreaterThan(auth.Amount):
		return fmt.Sprintf("the authorization holds %s, less than %s", auth.Amount, req.Amount)
	}
	return ""
}

// commitCapture records the decision d of the capture under key: a
// succeeded one takes the hold. Called with p.mu held, after
// captureRefusal found nothing in the way of a succeeded one.
func (p *Provider) commitCapture(key string, req captureRequest, d Decision) CaptureAnswer {
	a := CaptureAnswer{Decision: d, Authorization: req.Authorization}
	if a.Status == StatusSucceeded {
		h := p.holds[req.Authorization]
		h.state, h.capture, h.captured = HoldCaptured, key, req.Amount
	}
	p.captures.record(key, a)
	p.webhooks.made("capture", a.Decision, a, req.Authorization)
	return a
}

// decideVoid makes the void for a key admitted as new: its authorization's
// hold must be active, as for a capture (and under the same lock), or it
// is refused and the key forgotten. Declined for a decline_ reference
// (its own, or its authorization's); the hold then stays active. Called
// with p.mu held.
func (p *Provider) decideVoid(key string, req voidRequest) (VoidAnswer, error) {
	if refusal := p.voidRefusal(req); refusal != "" {
		p.voids.forget(key)
		p.voidCounters.Refusals++
		return VoidAnswer{}, fmt.Errorf("%w: %s; nothing was voided", errVoidRefused, refusal)
	}
	c := &p.voidCounters
	return p.commitVoid(key, req, p.voids.decide(key, req, "vo_", &c.Voids, &c.Declines, p.now())), nil
}

// voidRefusal says why req cannot be voided now: its authorization's hold
// is not active; "" when it can. Called with p.mu held.
func (p *Provider) voidRefusal(req voidRequest) string {
	p.expireLocked()
	_, _, refusal := p.activeHoldLocked(req.Authorization)
	return refusal
}

// voidAnswer is the answer of d for a void: its amount and currency are
// what the authorization holds, its reference the void's own. Called with
// p.mu held.
func (p *Provider) voidAnswer(d Decision, req voidRequest) VoidAnswer {
	auth, _, _ := p.authorizations.lookup(req.Authorization)
	d.Amount, d.Currency, d.Reference = auth.Amount, auth.Currency, req.Reference
	return VoidAnswer{Decision: d, Authorization: req.Authorization}
}

// commitVoid records the decision d of the void under key: a succeeded one
// releases the hold. Called with p.mu held, after voidRefusal found
// nothing in the way of a succeeded one.
func (p *Provider) commitVoid(key string, req voidRequest, d Decision) VoidAnswer {
	a := p.voidAnswer(d, req)
	if a.Status == StatusSucceeded {
		h := p.holds[req.Authorization]
		h.state, h.void = HoldVoided, key
	}
	p.voids.record(key, a)
	p.webhooks.send("void."+string(d.Status), d.Created, req.fields().Reference, a, req.Authorization)
	return a
}
