package app

import (
	"bytes"
	"time"
)

// Phase 0 may read a key from this replica's memory instead of the
// database: a completed key's answer, kept by the replay cache, answers
// its replays and its reuse with another command (409) as the record
// itself would (docs/decisions/0031). What makes that safe:
//
//   - A COMPLETED record never changes. Every statement that writes a key
//     after its claim (the completion, the release, the lock's early end,
//     the claim's takeover) matches only IN_PROGRESS; a stored answer is
//     inserted only where no record is (KeyStore.Answer); a saga step's
//     replay re-publishes the stored bytes and writes nothing to the key.
//   - The purge alone deletes a COMPLETED record, and never before the
//     record's created_at plus the idempotency TTL, read on the clock of
//     whichever process runs it. An entry is kept until that time less a
//     clock margin, on this replica's clock, and at most the cache's
//     maximum age: it is gone before the record can be.
//   - Only COMPLETED records go in; an IN_PROGRESS one can still change.
//
// A miss reads the database as before.

// ReplayCache is this replica's memory of completed keys: bounded, with
// entries that end. The adapter is internal/replaycache.
type ReplayCache interface {
	// Get returns the record kept for scope, if one is kept and now is
	// before the time it was put until.
	Get(scope IdempotencyScope, now time.Time) (IdempotencyRecord, bool)
	// Put keeps rec, a COMPLETED record, for its scope until until.
	Put(rec IdempotencyRecord, until time.Time)
}

// ReplayCachePolicy is how long the replay cache keeps a completed key.
type ReplayCachePolicy struct {
	// Retention is the shortest time after its created_at that any
	// process's purge keeps a COMPLETED record: the least IDEMPOTENCY_TTL
	// a release accepts, so a replica whose TTL is longer (a rolling
	// deploy that changes it) never keeps an entry past the record.
	Retention time.Duration
	// ClockMargin is how far the clock of the process that runs the purge
	// may be ahead of this replica's: created_at is stamped by the
	// database, the purge's cutoff is its own clock less the TTL, and the
	// entry's end is judged by this replica's clock.
	ClockMargin time.Duration
	// MaxAge bounds an entry's life from the moment it is put, whatever
	// the record's age.
	MaxAge time.Duration
	// Now is the clock entries are judged by; time.Now when nil.
	Now func() time.Time
}

// replayCache is the cache with the policy it is kept by.
type replayCache struct {
	cache  ReplayCache
	policy ReplayCachePolicy
}

// WithReplayCache answers phase 0 from cache when it holds the key, and
// keeps there every COMPLETED record phase 0 reads from the database, by
// policy. Without it phase 0 always reads the database.
func WithReplayCache(cache ReplayCache, policy ReplayCachePolicy) CoreOption {
	return func(c *Core) {
		if policy.Now == nil {
			policy.Now = time.Now
		}
		c.replays = &replayCache{cache: cache, policy: policy}
	}
}

// cached is the key's completed record from the replay cache, if it holds
// one. The cache's bytes never leave it: what a caller does with its
// answer cannot change the next replay's.
func (c *Core) cached(scope IdempotencyScope) (IdempotencyRecord, bool) {
	if c.replays == nil {
		return IdempotencyRecord{}, false
	}
	rec, ok := c.replays.cache.Get(scope, c.replays.policy.Now())
	if ok {
		rec.Response.Body = bytes.Clone(rec.Response.Body)
	}
	return rec, ok
}

// remember keeps a record read from the database in the replay cache, if
// it is completed (replayCache.keep).
func (c *Core) remember(rec IdempotencyRecord) {
	if c.replays != nil {
		c.replays.keep(rec, c.replays.policy.Now())
	}
}

// keep puts a COMPLETED record read at now into the cache, until the
// earlier of its purge's earliest time less the clock margin and now plus
// the maximum age. A record without its created_at is not kept: its
// purge time is unknown.
func (r *replayCache) keep(rec IdempotencyRecord, now time.Time) {
	if rec.Status != RecordCompleted || rec.CreatedAt.IsZero() {
		return
	}
	until := rec.CreatedAt.Add(r.policy.Retention - r.policy.ClockMargin)
	if byAge := now.Add(r.policy.MaxAge); byAge.Before(until) {
		until = byAge
	}
	if !now.Before(until) {
		return
	}
	// Nor do the caller's bytes enter it.
	rec.Response = StoredResponse{StatusCode: rec.Response.StatusCode, Body: bytes.Clone(rec.Response.Body)}
	r.cache.Put(rec, until)
}
