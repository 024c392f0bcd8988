package sandboxprovider

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The received mode of modifications (captures, refunds and voids), the
// way Adyen answers them: a request is answered 202 with the
// modification's id and status "received", and decided later
// (Config.ModificationDelay after it), when the decision is announced by
// a signed event only (capture.succeeded, capture.failed, ...). A
// received modification can fail: what would have refused it at once (no
// active hold, more than its charge has left) fails it when it is
// decided, and so do a modfail_ reference and the seeded
// Config.ModificationFailureRate. Its lookup answers what the provider
// knows: the receipt ("received") until the decision, then the decision.
// The key's first answer, replayed to every later request under it, is
// the receipt.

// ModificationMode is how the provider answers captures, refunds and
// voids.
type ModificationMode string

const (
	// ModificationsAtOnce (the zero value): the answer is the decision.
	ModificationsAtOnce ModificationMode = ""
	// ModificationsReceived: the answer is a receipt (202 "received"); the
	// decision comes later, as an event.
	ModificationsReceived ModificationMode = "received"
)

// ParseModificationMode reads SANDBOX_MODIFICATIONS: "at-once" (or empty)
// or "received".
func ParseModificationMode(s string) (ModificationMode, error) {
	switch s {
	case "", "at-once":
		return ModificationsAtOnce, nil
	case string(ModificationsReceived):
		return ModificationsReceived, nil
	default:
		return "", fmt.Errorf("want at-once or received, got %q", s)
	}
}

// FailPrefix makes a received modification fail when it is decided; at
// once, it means nothing.
const FailPrefix = "modfail_"

// ReceivedCounters count the received mode's modifications of a kind.
type ReceivedCounters struct {
	Received int `json:"received"` // answered "received" (202), to be decided later
	Failures int `json:"failures"` // received, then failed: nothing moved
}

// modification is what receiving and deciding one kind of modification
// needs of it.
type modification[R keyedRequest[R], A any] struct {
	idPrefix string // "cp_": its answers' ids
	// counts are the kind's counters: received and failed, made and
	// declined.
	counts func(p *Provider) (received *ReceivedCounters, made, declines *int)
	// answer is the kind's answer of decision d to req.
	answer func(p *Provider, d Decision, req R) A
	// refusal says why req cannot be made now; "" when it can.
	refusal func(p *Provider, req R) string
	// commit records the decision d of key, makes what it moves, and
	// announces it.
	commit func(p *Provider, key string, req R, d Decision) A
}

var captureModification = &modification[captureRequest, CaptureAnswer]{idPrefix: "cp_",
	counts: func(p *Provider) (*ReceivedCounters, *int, *int) {
		c := &p.captureCounters
		return &c.ReceivedCounters, &c.Captures, &c.Declines
	},
	answer: func(_ *Provider, d Decision, req captureRequest) CaptureAnswer {
		return CaptureAnswer{Decision: d, Authorization: req.Authorization}
	},
	refusal: (*Provider).captureRefusal, commit: (*Provider).commitCapture}

var voidModification = &modification[voidRequest, VoidAnswer]{idPrefix: "vo_",
	counts: func(p *Provider) (*ReceivedCounters, *int, *int) {
		c := &p.voidCounters
		return &c.ReceivedCounters, &c.Voids, &c.Declines
	},
	answer: (*Provider).voidAnswer, refusal: (*Provider).voidRefusal, commit: (*Provider).commitVoid}

var refundModification = &modification[refundRequest, RefundAnswer]{idPrefix: "re_",
	counts: func(p *Provider) (*ReceivedCounters, *int, *int) {
		c := &p.refundCounters
		return &c.ReceivedCounters, &c.Refunds, &c.Declines
	},
	answer: func(_ *Provider, d Decision, req refundRequest) RefundAnswer {
		return RefundAnswer{Decision: d, Charge: req.Charge}
	},
	refusal: (*Provider).refundRefusal, commit: (*Provider).commitRefund}

// receives reports whether a request of the kind is received rather than
// decided at once.
func (k kind[R, A]) receives(p *Provider) bool {
	return k.modification != nil && p.cfg.Modifications == ModificationsReceived
}

// receive records the receipt of a key admitted as new and returns it;
// its decision is made ModificationDelay later. Called with p.mu held.
func (k kind[R, A]) receive(p *Provider, key string, req R) A {
	m := k.modification
	d := k.book(p).newDecision(key, req, m.idPrefix, StatusReceived, p.now())
	a := m.answer(p, d, req)
	k.book(p).receive(key, a)
	received, _, _ := m.counts(p)
	received.Received++
	p.pending.add(p, p.cfg.ModificationDelay, func() { k.decideReceived(p, key, req, d) })
	return a
}

// decideReceived decides the received modification under key: failed for
// a modfail_ reference, at the failure rate, or when it cannot be made
// (the refusal it would have met at once); declined for a decline_
// reference; made otherwise. received is its receipt, whose id it keeps.
// Called with p.mu held.
func (k kind[R, A]) decideReceived(p *Provider, key string, req R, received Decision) {
	m := k.modification
	counts, made, declines := m.counts(p)
	d := received
	d.Created = p.now().UTC()
	ref := req.fields().Reference
	switch {
	case strings.HasPrefix(ref, FailPrefix):
		d.Status, d.FailureReason = StatusFailed, "the reference asks for a failure"
	case !strings.HasPrefix(ref, DeclinePrefix) && p.pending.fails(p.cfg.ModificationFailureRate):
		d.Status, d.FailureReason = StatusFailed, "a failure drawn at the failure rate"
	}
	if d.Status != StatusFailed {
		if refusal := m.refusal(p, req); refusal != "" {
			d.Status, d.FailureReason = StatusFailed, refusal
		}
	}
	switch {
	case d.Status == StatusFailed:
		counts.Failures++
	case strings.HasPrefix(ref, DeclinePrefix):
		d.Status = StatusDeclined
		*declines++
	default:
		d.Status = StatusSucceeded
		*made++
	}
	m.commit(p, key, req, d)
}

// pendingDecisions are the received modifications waiting for their
// decision, each on a timer of its own, and the stream their failures
// are drawn from.
type pendingDecisions struct {
	rng    *rand.Rand
	timers map[*time.Timer]pendingDecision
	seq    int
}

// pendingDecision is one decision waiting: seq orders them as they were
// received.
type pendingDecision struct {
	seq    int
	decide func()
}

func newPendingDecisions(seed uint64) pendingDecisions {
	// Another stream of the seed than the calls' faults and the webhooks'.
	return pendingDecisions{rng: rand.New(rand.NewPCG(seed, seed^0x3c6ef372fe94f82b)), timers: map[*time.Timer]pendingDecision{}}
}

// add runs decide, with p.mu held, after delay. Called with p.mu held, so
// the timer is in the set before its function can run.
func (d *pendingDecisions) add(p *Provider, delay time.Duration, decide func()) {
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := d.timers[t]; !ok {
			return // decided by DecideReceived, or stopped
		}
		delete(d.timers, t)
		decide()
	})
	d.seq++
	d.timers[t] = pendingDecision{seq: d.seq, decide: decide}
}

// fails draws whether a modification fails, at rate.
func (d *pendingDecisions) fails(rate float64) bool {
	return rate > 0 && d.rng.Float64() < rate
}

// Undecided counts the received modifications not decided yet.
func (p *Provider) Undecided() int { return locked(p, func() int { return len(p.pending.timers) }) }

// DecideReceived decides every received modification now, without
// waiting for its delay, and returns how many it decided: for a test
// that wants the decisions made before it goes on.
func (p *Provider) DecideReceived() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	timers := slices.SortedFunc(maps.Keys(p.pending.timers), func(a, b *time.Timer) int {
		return p.pending.timers[a].seq - p.pending.timers[b].seq
	})
	for _, t := range timers {
		t.Stop()
		pd := p.pending.timers[t]
		delete(p.pending.timers, t)
		pd.decide()
	}
	return len(timers)
}

// stopDecisions stops the timers: a provider that stops decides nothing
// more, and what it received and did not decide is lost with its
// in-memory ledger.
func (p *Provider) stopDecisions() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t := range p.pending.timers {
		t.Stop()
		delete(p.pending.timers, t)
	}
}
