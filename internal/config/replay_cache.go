package config

import "time"

// ReplayCache configures each replica's in-memory cache of completed
// idempotency keys (internal/replaycache, docs/decisions/0031): a replay
// or a reused key it holds is answered without the database.
type ReplayCache struct {
	// Entries (REPLAY_CACHE_ENTRIES, default 10000, 0 to 1000000) is the
	// most keys it holds; the least recently used makes room. 0 turns the
	// cache off: every phase 0 reads the database.
	Entries int
	// MaxAge (REPLAY_CACHE_MAX_AGE, default 10m, 1s to 24h) is the longest
	// an entry is kept after it was read from the database, however young
	// its record is.
	MaxAge time.Duration
	// ClockMargin (REPLAY_CACHE_CLOCK_MARGIN, default 5m, 1s to 1h) is
	// how far ahead of this replica's clock the clock of the process that
	// runs the purge may be: an entry ends this long before its record's
	// created_at plus MinIdempotencyTTL, the earliest any purge deletes it.
	ClockMargin time.Duration
}

// maxReplayCacheEntries bounds the cache's memory: a stored answer is a
// few hundred bytes, so a million entries is of the order of a gigabyte.
const maxReplayCacheEntries = 1_000_000

func (p *parser) replayCache() ReplayCache {
	c := ReplayCache{
		Entries:     p.nonNegativeInt("REPLAY_CACHE_ENTRIES", 10_000),
		MaxAge:      p.duration("REPLAY_CACHE_MAX_AGE", 10*time.Minute, time.Second, 24*time.Hour),
		ClockMargin: p.duration("REPLAY_CACHE_CLOCK_MARGIN", 5*time.Minute, time.Second, time.Hour),
	}
	if c.Entries > maxReplayCacheEntries {
		p.fail("REPLAY_CACHE_ENTRIES", "must be at most %d, got %d", maxReplayCacheEntries, c.Entries)
		c.Entries = 0
	}
	return c
}
