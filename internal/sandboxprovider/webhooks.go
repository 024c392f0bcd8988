package sandboxprovider

import (
	"bytes"
	"container/heap"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/example/payment-service/internal/backoff"
	"github.com/example/payment-service/internal/webhooksig"
)

// WebhookFault is a way the provider's webhook deliveries misbehave.
type WebhookFault string

const (
	// WebhookDuplicate: the event is delivered twice, both deliveries at
	// once, each retried until answered 2xx (same id, same body).
	WebhookDuplicate WebhookFault = "duplicate"
	// WebhookSwap: the event is held until the next event about the same
	// charge (a refund's) has been sent, so the two arrive swapped; at most
	// WebhookConfig.LateDelay, if no such event comes.
	WebhookSwap WebhookFault = "swap"
	// WebhookLate: the event's first delivery waits WebhookConfig.LateDelay,
	// longer than the service's completer interval.
	WebhookLate WebhookFault = "late"
	// WebhookLost: the event is made and never delivered.
	WebhookLost WebhookFault = "lost"
)

// WebhookFaults lists every webhook fault, in the order seeded draws use.
var WebhookFaults = []WebhookFault{WebhookDuplicate, WebhookSwap, WebhookLate, WebhookLost}

// webhookPrefixes map a reference's prefix, after the call's own prefix if
// it has one (see the package comment), to its webhook fault.
var webhookPrefixes = []struct {
	prefix string
	fault  WebhookFault
}{
	{"hookdup_", WebhookDuplicate},
	{"hookswap_", WebhookSwap},
	{"hooklate_", WebhookLate},
	{"hooklost_", WebhookLost},
}

// WebhookConfig turns the provider's webhooks on and tunes them. The zero
// value sends none.
type WebhookConfig struct {
	// URL receives every event by POST; empty means no webhooks.
	URL string
	// Secret signs every delivery (internal/webhooksig).
	Secret string
	// RetryFor bounds the retries of a delivery, from the event's making:
	// no attempt starts after it. Zero means 10 minutes.
	RetryFor time.Duration
	// FirstRetry is the pause before the first retry, doubled after each
	// failed attempt up to MaxRetry, with jitter drawn from the seeded
	// source. Zero means 250 ms and 30 s.
	FirstRetry, MaxRetry time.Duration
	// Timeout bounds one attempt: no answer within it is a failed attempt.
	// Zero means 5 s.
	Timeout time.Duration
	// LateDelay is how late a WebhookLate delivery starts, and how long a
	// WebhookSwap event waits at most for the event it is swapped with.
	// Zero means 45 s: longer than the service's completer interval (30 s
	// by default), so that a late delivery meets a payment the completer
	// has already settled.
	LateDelay time.Duration
	// FaultRates gives, per webhook fault, the probability that an event
	// whose reference has no webhook prefix meets that fault; they sum to
	// at most 1. Drawn from a source seeded by Config.Seed, apart from the
	// calls' faults, so turning webhooks on changes no call's fault.
	FaultRates map[WebhookFault]float64
	// Workers is how many deliveries are attempted at once. Zero means 4.
	Workers int
	// QueueSize bounds the deliveries waiting or being attempted; an event
	// that finds the queue full is dropped and counted (Dropped), and the
	// service finds its outcome as for a lost one. Zero means 10,000.
	QueueSize int
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.RetryFor, 10*time.Minute)
	def(&c.FirstRetry, 250*time.Millisecond)
	def(&c.MaxRetry, 30*time.Second)
	def(&c.Timeout, 5*time.Second)
	def(&c.LateDelay, 45*time.Second)
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.QueueSize == 0 {
		c.QueueSize = 10_000
	}
	return c
}

// WebhookCounters count what the provider did with webhooks, since it
// started.
type WebhookCounters struct {
	Events     int                  `json:"events"`     // events made: one per decision
	Deliveries int                  `json:"deliveries"` // deliveries answered 2xx (a duplicate is two)
	Attempts   int                  `json:"attempts"`   // POSTs sent, retries included
	Retries    int                  `json:"retries"`    // attempts after a failed one
	Expired    int                  `json:"expired"`    // deliveries given up at RetryFor
	Dropped    int                  `json:"dropped"`    // events that found the queue full
	Pending    int                  `json:"pending"`    // deliveries waiting or being attempted now
	Faults     map[WebhookFault]int `json:"faults"`
}

// Event is the body of a webhook delivery.
type Event struct {
	ID string `json:"id"` // evt_<unique>: the same on every delivery of the event
	// Type is <object>.<status> for a decision (charge, refund,
	// authorization, capture or void; succeeded or declined, and for a
	// received refund, capture or void failed), or authorization.expired
	// when a hold lapsed.
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
	// Data is the object exactly as the lookup by key answered it when the
	// event was made (ChargeAnswer, RefundAnswer, AuthorizationState,
	// CaptureAnswer, VoidAnswer).
	Data json.RawMessage `json:"data"`
}

// event is an event made, ready to send: its body is signed afresh at
// each attempt, byte for byte the same.
type event struct {
	body []byte
	// charge is the idempotency key of the charge the event is about (its
	// own, or its refund's charge; for a two-step payment, its
	// authorization's): events of one charge may be swapped.
	charge string
	seq    int // the order events were made in
}

// delivery is one delivery of an event, retried until answered 2xx or
// given up (a duplicated event has two).
type delivery struct {
	ev       *event
	due      time.Time // when its next attempt may start
	deadline time.Time // no attempt starts after it
	attempts int
	swapped  bool // held until a later event of its charge is sent
}

// webhookSender queues and delivers the events of one provider: a
// dispatcher hands due deliveries to a fixed set of workers; retries,
// late and swapped deliveries wait in the queue, not in a worker.
type webhookSender struct {
	cfg    WebhookConfig
	client *http.Client

	mu sync.Mutex
	// faults draws the events' faults, in the order the events are made;
	// jitter draws the pauses, in the order attempts fail. Two sources, so
	// that when attempts fail does not change which event meets a fault.
	faults, jitter *rand.Rand
	queue          deliveryQueue
	inFlight       int // popped from the queue, not yet finished
	swapped        int // deliveries in the queue held for a swap
	seq            int
	counts         WebhookCounters

	wake   chan struct{} // a delivery was queued
	ready  chan *delivery
	stop   chan struct{}
	ctx    context.Context // cancelled at stop: attempts in flight end
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

func newWebhookSender(cfg WebhookConfig, seed uint64) *webhookSender {
	if cfg.URL == "" {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &webhookSender{
		cfg:    cfg.withDefaults(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
		// Other streams of the seed than the calls' faults.
		faults: rand.New(rand.NewPCG(seed, seed^0x5be0cd19137e2179)),
		jitter: rand.New(rand.NewPCG(seed, seed^0x1f83d9abfb41bd6b)),
		counts: WebhookCounters{Faults: map[WebhookFault]int{}},
		wake:   make(chan struct{}, 1),
		ready:  make(chan *delivery),
		stop:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
}

// start runs the dispatcher and the workers until close.
func (s *webhookSender) start() {
	if s == nil {
		return
	}
	s.wg.Go(s.dispatch)
	for range s.cfg.Workers {
		s.wg.Go(s.work)
	}
}

// close stops delivering at once: attempts in flight are cancelled, and
// what is still queued is lost with the provider's in-memory ledger. It
// returns when every goroutine of the sender has ended.
func (s *webhookSender) close() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		close(s.stop)
		s.cancel()
		s.wg.Wait()
		s.client.CloseIdleConnections()
	})
}

// made queues the event of a decision: noun is "charge", "refund",
// "authorization" or "capture", answer what the lookup answers for it,
// charge the key of the charge (or authorization) it is about. Called
// with Provider.mu held; it never blocks.
func (s *webhookSender) made(noun string, d Decision, answer any, charge string) {
	s.send(noun+"."+string(d.Status), d.Created, d.Reference, answer, charge)
}

// send queues an event of type typ, made at created, whose data is answer:
// its webhook fault goes by ref, and charge names the charge (or
// authorization) it is about. Called with Provider.mu held; it never
// blocks.
func (s *webhookSender) send(typ string, created time.Time, ref string, answer any, charge string) {
	if s == nil {
		return
	}
	data, err := json.Marshal(answer)
	if err != nil {
		panic(err) // the answers are plain structs: it cannot fail
	}
	body, err := json.Marshal(Event{ID: newEventID(), Type: typ, Created: created, Data: data})
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	ev := &event{body: body, charge: charge, seq: s.seq}
	s.counts.Events++
	fault := s.faultFor(ref)
	if fault != "" {
		s.counts.Faults[fault]++
	}
	now := time.Now()
	first := delivery{ev: ev, due: now, deadline: now.Add(s.cfg.RetryFor)}
	switch fault {
	case WebhookLost:
		return
	case WebhookDuplicate:
		s.queueLocked(first)
	case WebhookLate:
		first.due = now.Add(s.cfg.LateDelay)
	case WebhookSwap:
		first.due, first.swapped = now.Add(s.cfg.LateDelay), true
	}
	s.queueLocked(first)
}

// newEventID is unique across the provider's restarts too: the service
// remembers the ids it applied for longer than the sandbox remembers
// anything.
func newEventID() string { return "evt_" + strings.ToLower(crand.Text()) }

// queueLocked queues a copy of d, unless the queue is full. s.mu is held.
func (s *webhookSender) queueLocked(d delivery) {
	if len(s.queue)+s.inFlight >= s.cfg.QueueSize {
		s.counts.Dropped++
		return
	}
	if d.swapped {
		s.swapped++
	}
	heap.Push(&s.queue, &d)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// faultFor picks the webhook fault of an event by its reference: a webhook
// prefix right at its start or after the call's prefix, or else a seeded
// draw. s.mu is held.
func (s *webhookSender) faultFor(ref string) WebhookFault {
	rest := ref
	for _, pf := range prefixes {
		if after, ok := strings.CutPrefix(ref, pf.prefix); ok {
			rest = after
			break
		}
	}
	rest = strings.TrimPrefix(strings.TrimPrefix(rest, DeclinePrefix), FailPrefix)
	for _, wp := range webhookPrefixes {
		if strings.HasPrefix(rest, wp.prefix) {
			return wp.fault
		}
	}
	if len(s.cfg.FaultRates) == 0 {
		return ""
	}
	draw := s.faults.Float64()
	for _, f := range WebhookFaults {
		if draw < s.cfg.FaultRates[f] {
			return f
		}
		draw -= s.cfg.FaultRates[f]
	}
	return ""
}

// dispatch hands each delivery to a worker when it is due.
func (s *webhookSender) dispatch() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d, wait := s.popDue()
		if d != nil {
			select {
			case s.ready <- d:
				continue
			case <-s.stop:
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// popDue takes the earliest delivery off the queue if it is due, or says
// how long until it is.
func (s *webhookSender) popDue() (*delivery, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil, time.Hour
	}
	if wait := time.Until(s.queue[0].due); wait > 0 {
		return nil, wait
	}
	d := heap.Pop(&s.queue).(*delivery)
	if d.swapped {
		// Its bound ran out before any later event of its charge came.
		d.swapped = false
		s.swapped--
	}
	s.inFlight++
	return d, 0
}

func (s *webhookSender) work() {
	for {
		select {
		case d := <-s.ready:
			s.attempt(d)
		case <-s.stop:
			return
		}
	}
}

// attempt sends one attempt of d and queues its retry if it failed and
// its bound allows one.
func (s *webhookSender) attempt(d *delivery) {
	delivered := s.post(d.ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	s.counts.Attempts++
	if d.attempts > 0 {
		s.counts.Retries++
	}
	d.attempts++
	s.releaseSwappedLocked(d.ev)
	if delivered {
		s.counts.Deliveries++
		return
	}
	now := time.Now()
	due := now.Add(s.pauseLocked(d.attempts))
	if due.After(d.deadline) {
		s.counts.Expired++
		return
	}
	d.due = due
	s.queueLocked(*d)
}

// releaseSwappedLocked makes due at once the swapped deliveries of the
// events of sent's charge made before it: they now arrive after it.
func (s *webhookSender) releaseSwappedLocked(sent *event) {
	if s.swapped == 0 {
		return
	}
	now := time.Now()
	for _, d := range s.queue {
		if d.swapped && d.ev.charge == sent.charge && d.ev.seq < sent.seq {
			d.swapped, d.due = false, now
			s.swapped--
		}
	}
	heap.Init(&s.queue)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pauseLocked is the pause after the n-th failed attempt: FirstRetry
// doubled n-1 times up to MaxRetry, drawn from [d/2, d] with the seeded
// source so that a run can be repeated.
func (s *webhookSender) pauseLocked(n int) time.Duration {
	return backoff.JitterFrom(s.jitter, backoff.Planned(s.cfg.FirstRetry, s.cfg.MaxRetry, n))
}

// post makes one attempt: signed now, answered 2xx within the timeout or
// failed.
func (s *webhookSender) post(ev *event) bool {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.URL, bytes.NewReader(ev.body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhooksig.Header, webhooksig.Sign(time.Now(), ev.body, []byte(s.cfg.Secret)))
	resp, err := s.client.Do(req)
	if err != nil {
		return false
	}
	// Read a little of the answer so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// counters copies the counters.
func (s *webhookSender) counters() WebhookCounters {
	if s == nil {
		return WebhookCounters{Faults: map[WebhookFault]int{}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	c.Faults = maps.Clone(s.counts.Faults)
	c.Pending = len(s.queue) + s.inFlight
	return c
}

// deliveryQueue is a heap of deliveries, the earliest due first.
type deliveryQueue []*delivery

func (q deliveryQueue) Len() int           { return len(q) }
func (q deliveryQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q deliveryQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *deliveryQueue) Push(x any)        { *q = append(*q, x.(*delivery)) }
func (q *deliveryQueue) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return d
}
