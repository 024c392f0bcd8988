// Package replaycache keeps completed idempotency keys' answers in this
// process's memory (app.ReplayCache), so that a replay is answered
// without the database. It is bounded in entries and evicts the least
// recently used; an entry also ends at the time it was put until, which
// the core sets before the record's purge (docs/decisions/0031). What
// goes in and for how long is the core's decision; this package only
// keeps to it and counts.
package replaycache

import (
	"container/list"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/example/payment-service/internal/app"
)

// Cache is a bounded least-recently-used map from a key's scope (client
// and key: the identity phase 0 reads a record by) to its record.
type Cache struct {
	mu      sync.Mutex
	max     int
	order   *list.List // front: most recently used; values are *entry
	entries map[app.IdempotencyScope]*list.Element
	metrics metrics
}

type entry struct {
	rec   app.IdempotencyRecord
	until time.Time
}

type metrics struct {
	hits, misses     prometheus.Counter
	evictedForSpace  prometheus.Counter
	evictedForExpiry prometheus.Counter
}

// New returns a cache of at most entries keys (at least one), its
// metrics registered in reg.
func New(entries int, reg prometheus.Registerer) *Cache {
	c := &Cache{max: max(entries, 1), order: list.New(), entries: make(map[app.IdempotencyScope]*list.Element)}
	evictions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payment_idempotency_replay_cache_evictions_total",
		Help: "Completed keys dropped from this replica's replay cache, by reason (capacity: the least recently used made room; expired: met after the end the core set, before the record's purge).",
	}, []string{"reason"})
	c.metrics = metrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_idempotency_replay_cache_hits_total",
			Help: "Phase 0 reads answered from this replica's replay cache of completed keys, without the database.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "payment_idempotency_replay_cache_misses_total",
			Help: "Phase 0 reads the replay cache could not answer, which read the database.",
		}),
		evictedForSpace:  evictions.WithLabelValues("capacity"),
		evictedForExpiry: evictions.WithLabelValues("expired"),
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "payment_idempotency_replay_cache_entries",
		Help: "Completed keys this replica's replay cache holds now.",
	}, func() float64 { return float64(c.Len()) })
	reg.MustRegister(c.metrics.hits, c.metrics.misses, evictions, held)
	return c
}

// Get returns the record kept for scope while now is before its end; an
// entry met after its end is dropped.
func (c *Cache) Get(scope app.IdempotencyScope, now time.Time) (app.IdempotencyRecord, bool) {
	c.mu.Lock()
	el, ok := c.entries[scope]
	if ok {
		e := el.Value.(*entry)
		if now.Before(e.until) {
			c.order.MoveToFront(el)
			rec := e.rec
			c.mu.Unlock()
			c.metrics.hits.Inc()
			return rec, true
		}
		c.remove(el)
		c.metrics.evictedForExpiry.Inc()
	}
	c.mu.Unlock()
	c.metrics.misses.Inc()
	return app.IdempotencyRecord{}, false
}

// Put keeps rec until until, in place of what scope held; when the cache
// is full, the least recently used entry makes room.
func (c *Cache) Put(rec app.IdempotencyRecord, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[rec.Scope]; ok {
		el.Value = &entry{rec: rec, until: until}
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.max {
		c.remove(c.order.Back())
		c.metrics.evictedForSpace.Inc()
	}
	c.entries[rec.Scope] = c.order.PushFront(&entry{rec: rec, until: until})
}

// Len is how many entries the cache holds, ended ones not yet met
// included.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *Cache) remove(el *list.Element) {
	c.order.Remove(el)
	delete(c.entries, el.Value.(*entry).rec.Scope)
}

var _ app.ReplayCache = (*Cache)(nil)
