package app

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RetentionTable names a table that the retention job keeps bounded.
type RetentionTable string

const (
	// TableIdempotencyRecord is R-DIST-IDEM-3's idempotency_record.
	TableIdempotencyRecord RetentionTable = "idempotency_record"
	// TableProcessedEvent is R-DIST-IDEM-2's processed_event.
	TableProcessedEvent RetentionTable = "processed_event"
	// TableOutboxEvent is the outbox; only published rows are ever deleted.
	TableOutboxEvent RetentionTable = "outbox_event"
	// TableSagaStep is the saga's steps, kept as long as their keys.
	TableSagaStep RetentionTable = "saga_step"
)

// ErrRetentionTableAbsent: the table does not exist in this database (yet).
// The purge skips it instead of failing the whole run.
var ErrRetentionTableAbsent = errors.New("retention table does not exist")

// Retention deletes rows that are past their retention.
type Retention interface {
	// DeleteExpiredBatch deletes at most limit rows of table that are older
	// than cutoff and may go (the adapter declares, per table, what else a
	// row must satisfy), as one statement in its own short transaction. It
	// returns how many rows it deleted; fewer than limit means none are left.
	DeleteExpiredBatch(ctx context.Context, table RetentionTable, cutoff time.Time, limit int) (int, error)
}

// RetentionPolicy says how long each table keeps its rows.
type RetentionPolicy struct {
	// IdempotencyTTL is R-DIST-IDEM-5's 24-72 h.
	IdempotencyTTL time.Duration
	// ProcessedEvents must cover the time the topic can redeliver an event,
	// and never be shorter than IdempotencyTTL: a processed_event row deleted
	// sooner lets a replay apply an old event a second time.
	ProcessedEvents time.Duration
	// PublishedOutbox is how long a published outbox row is kept, for
	// diagnosis; an unpublished row is never deleted.
	PublishedOutbox time.Duration
}

// PurgeExpired deletes expired idempotency records, processed events and
// published outbox rows (R-DIST-IDEM-5's cleanup job), in bounded batches.
//
// Each batch is one short transaction, so a backlog of millions of rows
// never holds one long lock or writes one huge burst of WAL, and requests
// keep claiming keys while it runs.
type PurgeExpired struct {
	store     Retention
	policy    RetentionPolicy
	batchSize int
}

// NewPurgeExpired builds the use case; batchSize rows are deleted per
// statement.
func NewPurgeExpired(store Retention, policy RetentionPolicy, batchSize int) *PurgeExpired {
	return &PurgeExpired{store: store, policy: policy, batchSize: batchSize}
}

// PurgeResult is what one run did to one table.
type PurgeResult struct {
	// Table is the table purged.
	Table RetentionTable
	// Cutoff: rows older than this were deleted.
	Cutoff time.Time
	// Deleted is how many rows went.
	Deleted int
	// Batches is how many delete statements ran.
	Batches int
	// Skipped: the table does not exist.
	Skipped bool
}

// Handle purges every table once, as of now. The cutoffs are fixed at the
// start, so rows written during the run are never candidates and the run
// ends. It stops between batches when ctx ends and returns what it did so
// far with ctx's error.
func (uc *PurgeExpired) Handle(ctx context.Context, now time.Time) ([]PurgeResult, error) {
	plan := []struct {
		table RetentionTable
		keep  time.Duration
	}{
		{TableIdempotencyRecord, uc.policy.IdempotencyTTL},
		{TableProcessedEvent, uc.policy.ProcessedEvents},
		{TableOutboxEvent, uc.policy.PublishedOutbox},
		{TableSagaStep, uc.policy.IdempotencyTTL},
	}
	results := make([]PurgeResult, 0, len(plan))
	for _, p := range plan {
		res := PurgeResult{Table: p.table, Cutoff: now.Add(-p.keep)}
		err := uc.purge(ctx, &res)
		results = append(results, res)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

func (uc *PurgeExpired) purge(ctx context.Context, res *PurgeResult) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := uc.store.DeleteExpiredBatch(ctx, res.Table, res.Cutoff, uc.batchSize)
		if errors.Is(err, ErrRetentionTableAbsent) {
			res.Skipped = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("purge %s: %w", res.Table, err)
		}
		res.Batches++
		res.Deleted += n
		if n < uc.batchSize {
			return nil
		}
	}
}
