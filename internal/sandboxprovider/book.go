package sandboxprovider

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"
)

// A book is the provider's record of one kind of keyed request (charges,
// refunds): what each idempotency key asked for and how it was decided,
// and the counters of the key machinery. Both kinds keep their idempotency
// promises and meet their faults through the same book code; only the
// decision is their own (decideCharge, decideRefund). Every method is
// called with Provider.mu held.
type book[R keyedRequest[R], A any] struct {
	byKey   map[string]*entry[R, A]
	byRef   map[string][]string // reference -> keys decided under it, in order
	refused map[string]bool     // keys a busy_ or refuse_ fault has already turned away once
	counts  *KeyCounters        // the kind's counters, inside the Provider's
	nextID  int
	// recorded, when set, is told every decision as it is recorded: the
	// balance's journal (balance.go) books the money it moved.
	recorded func(key string, answer A)
}

// keyedRequest is what a create call of one kind asks for.
type keyedRequest[R any] interface {
	// sameAs reports whether two requests ask for the same thing: a key's
	// retry must, or it is refused as a reused key.
	sameAs(R) bool
	// fields are the amount, currency and reference every kind has; faults
	// and declines go by the reference's prefix.
	fields() chargeRequest
}

// entry is one key's state: being processed, then decided; a
// modification in the received mode is received in between (its first
// answer, replayed to every later request, is then received, not the
// decision).
type entry[R, A any] struct {
	req      R
	received *A  // a received modification's first answer; nil otherwise
	answer   *A  // the decision; nil until it is made
	requests int // every request that carried the key, the first included
}

// first is the answer a request under the key gets: the received one,
// if the key was received, else the decision.
func (e *entry[R, A]) first() A {
	if e.received != nil {
		return *e.received
	}
	return *e.answer
}

func newBook[R keyedRequest[R], A any](counts *KeyCounters) *book[R, A] {
	counts.Faults = map[Fault]int{}
	return &book[R, A]{
		byKey:   map[string]*entry[R, A]{},
		byRef:   map[string][]string{},
		refused: map[string]bool{},
		counts:  counts,
	}
}

// admission is what begin decided for a request.
type admission int

const (
	admitNew        admission = iota // a new key: process it
	admitReplay                      // a decided key with the same parameters
	admitConflict                    // a known key with other parameters
	admitInProgress                  // the key's first request is still being processed (or a busy_ fault says so)
	admitRefused                     // a fault refuses the request before anything is done (FaultNotCharged, FaultRefused)
)

// begin looks the key up, picks the fault this request meets, and for a
// new key marks it as being processed. For a replay it returns the key's
// first answer, and whether that is a receipt rather than a decision.
func (b *book[R, A]) begin(p *Provider, key string, req R) (admission, Fault, A, bool) {
	var none A
	b.counts.Requests++
	e, known := b.byKey[key]
	switch {
	case known && !e.req.sameAs(req):
		b.counts.ParamConflicts++
		return admitConflict, FaultNone, none, false
	case known && e.answer == nil && e.received == nil:
		b.counts.InProgressRefusals++
		return admitInProgress, FaultNone, none, false
	}
	fault := p.faultFor(b.refused, key, req.fields().Reference, known)
	if fault != FaultNone {
		b.counts.Faults[fault]++
	}
	switch {
	case fault == FaultRefused:
		b.refused[key] = true
		return admitRefused, fault, none, false
	case fault == FaultBusy:
		// Refused as a provider refuses a key it is still processing.
		b.refused[key] = true
		return admitInProgress, fault, none, false
	case fault == FaultNotCharged:
		return admitRefused, fault, none, false
	case known:
		e.requests++
		b.counts.Replays++
		return admitReplay, fault, e.first(), e.received != nil
	}
	b.byKey[key] = &entry[R, A]{req: req}
	return admitNew, fault, none, false
}

// record stores the decision of a key admitted as new, or received.
func (b *book[R, A]) record(key string, answer A) {
	e := b.byKey[key]
	e.answer = &answer
	if e.received == nil {
		e.requests = 1
	}
	ref := e.req.fields().Reference
	b.byRef[ref] = append(b.byRef[ref], key)
	if b.recorded != nil {
		b.recorded(key, answer)
	}
}

// receive stores the first answer of a modification admitted as new in
// the received mode: it is decided later (modifications.go).
func (b *book[R, A]) receive(key string, answer A) {
	e := b.byKey[key]
	e.received, e.requests = &answer, 1
}

// decide decides a key admitted as new: declined for a decline_
// reference, succeeded otherwise, counted in made or declines; its id is
// idPrefix and the kind's next number.
func (b *book[R, A]) decide(key string, req R, idPrefix string, made, declines *int, now time.Time) Decision {
	d := b.newDecision(key, req, idPrefix, StatusSucceeded, now)
	if strings.HasPrefix(d.Reference, DeclinePrefix) {
		d.Status = StatusDeclined
		*declines++
	} else {
		*made++
	}
	return d
}

// newDecision is the answer of key with status, numbered by idPrefix and
// the kind's next number.
func (b *book[R, A]) newDecision(key string, req R, idPrefix string, status ChargeStatus, now time.Time) Decision {
	f := req.fields()
	return Decision{
		ID:             b.newID(idPrefix),
		IdempotencyKey: key,
		Status:         status,
		Amount:         f.Amount,
		Currency:       f.Currency,
		Reference:      f.Reference,
		Created:        now.UTC(),
	}
}

// newID numbers the kind's decisions: ch_00000001, re_00000001.
func (b *book[R, A]) newID(prefix string) string {
	b.nextID++
	return fmt.Sprintf("%s%08d", prefix, b.nextID)
}

// forget drops a key admitted as new that was refused instead of decided:
// nothing is recorded under it, as for a refuse_ fault.
func (b *book[R, A]) forget(key string) {
	delete(b.byKey, key)
}

// lookup returns what the key holds.
func (b *book[R, A]) lookup(key string) (A, int, LookupResult) {
	var none A
	e, ok := b.byKey[key]
	switch {
	case !ok:
		return none, 0, LookupNone
	case e.answer == nil && e.received != nil:
		return *e.received, e.requests, LookupReceived
	case e.answer == nil:
		return none, 0, LookupProcessing
	default:
		return *e.answer, e.requests, LookupCharged
	}
}

// decided returns every decided key's answer with its request count, by
// wrap, sorted by id.
func decided[R keyedRequest[R], A, T any](b *book[R, A], wrap func(A, int) T, id func(T) string) []T {
	var out []T
	for _, e := range b.byKey {
		if e.answer != nil {
			out = append(out, wrap(*e.answer, e.requests))
		}
	}
	sort.Slice(out, func(i, j int) bool { return id(out[i]) < id(out[j]) })
	return out
}

// byReference returns the answers decided under a reference, by wrap.
func byReference[R keyedRequest[R], A, T any](b *book[R, A], ref string, wrap func(A, int) T) []T {
	var out []T
	for _, key := range b.byRef[ref] {
		e := b.byKey[key]
		out = append(out, wrap(*e.answer, e.requests))
	}
	return out
}

// copyCounts copies the kind's counters, Faults included.
func copyCounts(c KeyCounters) KeyCounters {
	c.Faults = maps.Clone(c.Faults)
	return c
}

// faultFor picks the fault a request meets. A fault prefix gives the first
// request for a key its first fault, and every later one its later fault
// (a key is known once decided, refused once a busy_ or refuse_ fault has
// turned it away); a reference without one meets the random faults on every
// request, replays included, since a real network loses a replayed answer
// as easily as the first. Called with p.mu held.
func (p *Provider) faultFor(refused map[string]bool, key, ref string, known bool) Fault {
	for _, pf := range prefixes {
		if !strings.HasPrefix(ref, pf.prefix) {
			continue
		}
		if known || refused[key] {
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
