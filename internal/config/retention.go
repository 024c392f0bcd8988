package config

import (
	"math"
	"time"

	"github.com/robfig/cron/v3"
)

// Retention configures the retention jobs (internal/jobs): how long each
// table keeps its rows, how much a statement deletes, and when they run.
type Retention struct {
	// IdempotencyTTL (IDEMPOTENCY_TTL, default 72h) is how long an
	// idempotency record is kept. R-DIST-IDEM-5 fixes it between 24 h and
	// 72 h: shorter, and a client's real retry after an outage is charged a
	// second time; longer, and the table grows for nothing.
	IdempotencyTTL time.Duration
	// CleanupCron (IDEMPOTENCY_CLEANUP_CRON, default "0 0 3 * * *") is when
	// the purge runs: cron with a seconds field, in UTC.
	CleanupCron string
	// ProcessedEventRetention (PROCESSED_EVENT_RETENTION, default 168h)
	// must cover how long the topics can redeliver an event, and is never
	// shorter than IdempotencyTTL.
	ProcessedEventRetention time.Duration
	// OutboxRetention (OUTBOX_RETENTION, default 24h) is how long a
	// published outbox row is kept; unpublished rows are never deleted.
	OutboxRetention time.Duration
	// BatchSize (CLEANUP_BATCH_SIZE, default 5000) is the most rows one
	// delete statement (one transaction) removes.
	BatchSize int
	// RowsPerSecond (CLEANUP_ROWS_PER_SECOND, default 10000, 0: no limit)
	// is the most rows a purge deletes per second; it pauses between
	// batches to stay under it (internal/jobs.Paced), so charges keep
	// their share of the database's cores. The default clears a day of
	// 1,000 charges a second (259 million rows) in about 7 hours, and kept
	// charges at 0.8 of their throughput beside it (docs/capacity.md).
	RowsPerSecond int
	// CompleterCron (CHARGE_COMPLETER_CRON, default "30 * * * * *", every
	// minute) is when abandoned charges are driven to a final outcome.
	CompleterCron string
	// CompleterGrace (CHARGE_COMPLETER_GRACE, default 1m, 0 to 1h) is how
	// long after its lock expired an abandoned claim is left to the
	// client's own retry before the completer takes it. Fault tests set it
	// short to see the completer finish a charge within seconds.
	CompleterGrace time.Duration
}

// The bounds of R-DIST-IDEM-5. MinIdempotencyTTL is also the least any
// replica's purge keeps a completed record, whatever its own setting: the
// replay cache keeps nothing longer (ReplayCache).
const (
	MinIdempotencyTTL = 24 * time.Hour
	maxIdempotencyTTL = 72 * time.Hour
)

func (p *parser) retention() Retention {
	r := Retention{
		IdempotencyTTL:          p.duration("IDEMPOTENCY_TTL", maxIdempotencyTTL, math.MinInt64, math.MaxInt64), // bounds checked below, naming the rule,
		CleanupCron:             p.cron("IDEMPOTENCY_CLEANUP_CRON", "0 0 3 * * *"),
		ProcessedEventRetention: p.duration("PROCESSED_EVENT_RETENTION", 7*24*time.Hour, time.Hour, 90*24*time.Hour),
		OutboxRetention:         p.duration("OUTBOX_RETENTION", 24*time.Hour, time.Minute, 90*24*time.Hour),
		BatchSize:               p.positiveInt("CLEANUP_BATCH_SIZE", 5000),
		RowsPerSecond:           p.nonNegativeInt("CLEANUP_ROWS_PER_SECOND", 10_000),
		CompleterCron:           p.cron("CHARGE_COMPLETER_CRON", "30 * * * * *"),
		CompleterGrace:          p.duration("CHARGE_COMPLETER_GRACE", time.Minute, 0, time.Hour),
	}
	if r.IdempotencyTTL < MinIdempotencyTTL || r.IdempotencyTTL > maxIdempotencyTTL {
		p.fail("IDEMPOTENCY_TTL", "must be between %s and %s (rule R-DIST-IDEM-5: shorter lets a client's real retry charge twice, longer grows the table for nothing), got %s",
			MinIdempotencyTTL, maxIdempotencyTTL, r.IdempotencyTTL)
	}
	if r.ProcessedEventRetention < r.IdempotencyTTL {
		p.fail("PROCESSED_EVENT_RETENTION", "must not be shorter than IDEMPOTENCY_TTL (%s): a replay of the topic would apply events already processed, got %s",
			r.IdempotencyTTL, r.ProcessedEventRetention)
	}
	if r.BatchSize > 50000 {
		p.fail("CLEANUP_BATCH_SIZE", "must be at most 50000, so one delete stays a short transaction, got %d", r.BatchSize)
	}
	return r
}

// cronParser reads the six-field cron (seconds first) that the scheduler
// runs, the same grammar gocron's CronJob(spec, true) accepts.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

func (p *parser) cron(name, def string) string {
	v := p.str(name, def, false)
	if _, err := cronParser.Parse(v); err != nil {
		p.fail(name, "must be a cron spec with seconds, such as %q: %v", def, err)
		return def
	}
	return v
}
