package app

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/example/payment-service/internal/domain"
)

// OrderCreated is an OrderCreated.v1 event as the use case sees it: already
// decoded and validated by the adapter that received it (internal/consumer
// for Kafka). The use case knows nothing of JSON, topics or offsets.
type OrderCreated struct {
	// EventID is the event's unique id (R-DIST-IDEM-1), the dedup key of
	// R-DIST-IDEM-2.
	EventID uuid.UUID
	// SagaID is the saga the order belongs to, when the event named one.
	SagaID uuid.NullUUID
	// OccurredAt is when the order was created, by its producer's clock
	// (at most microsecond precision, see EventVersion).
	OccurredAt time.Time
	// Order is the order as the event describes it.
	Order domain.Order
}

// Version orders the events of one order: newer events win.
func (e OrderCreated) Version() EventVersion {
	return EventVersion{OccurredAt: e.OccurredAt, EventID: e.EventID}
}

// EventVersion is when an event happened, with its id as the tie-break for
// two events of the same instant. OccurredAt must have at most microsecond
// precision (what PostgreSQL stores), so that Go and SQL compare alike.
type EventVersion struct {
	// OccurredAt is the event's time; the later event is newer.
	OccurredAt time.Time
	// EventID breaks a tie between events of the same instant.
	EventID uuid.UUID
}

// After reports whether v is newer than o. UUIDs compare byte-wise, as
// PostgreSQL compares uuid values.
func (v EventVersion) After(o EventVersion) bool {
	if !v.OccurredAt.Equal(o.OccurredAt) {
		return v.OccurredAt.After(o.OccurredAt)
	}
	return bytes.Compare(v.EventID[:], o.EventID[:]) > 0
}

// ProcessedEvents is the processed_event table of R-DIST-IDEM-2.
type ProcessedEvents interface {
	// MarkProcessed records ids as processed by consumer with one
	// INSERT ... ON CONFLICT DO NOTHING and returns the ids that consumer
	// had not recorded before: exactly those the caller may apply. Records
	// are per consumer: another consumer's record of an id (a projection
	// rebuilt under a new name) does not count. A concurrent transaction
	// inserting the same id for the same consumer makes this one wait for
	// it, so two members of one consumer can never both see an id as new.
	// ids must be distinct.
	MarkProcessed(ctx context.Context, consumer string, ids []uuid.UUID) (map[uuid.UUID]bool, error)
}

// ApplyOrderEvents projects a batch of order events into order_projection,
// each event exactly once however often it is delivered (R-DIST-IDEM-2).
//
// The whole batch is one transaction: the processed_event inserts and the
// projection upserts commit together or not at all, so a crash anywhere
// leaves either both or neither, and redelivery after a crash finds the
// events processed and skips them. The caller commits its broker offsets
// only after Handle returns nil.
//
// Events of a batch may arrive in any order: the projection keeps, per
// order, the newest event by EventVersion, in the batch and across batches.
// That makes the result the same as applying the events one by one in
// partition order, whatever the order of delivery.
type ApplyOrderEvents struct {
	db       Transactor
	consumer string
}

// NewApplyOrderEvents builds the use case. consumer is the name recorded in
// processed_event.consumer_name (the consumer group).
func NewApplyOrderEvents(db Transactor, consumer string) *ApplyOrderEvents {
	return &ApplyOrderEvents{db: db, consumer: consumer}
}

// ApplyResult counts what a batch did. Every event is in exactly one of
// Duplicates, Superseded and Written.
type ApplyResult struct {
	// Duplicates were processed before (or appear twice in the batch):
	// skipped.
	Duplicates int
	// Superseded are new events that lost to a newer event of the same
	// order (stored or in the batch): recorded as processed, not written.
	Superseded int
	// Written are new events that wrote their order's row.
	Written int
}

// Handle applies events in one transaction. On error nothing is applied and
// the batch may be retried as it is.
func (uc *ApplyOrderEvents) Handle(ctx context.Context, events []OrderCreated) (ApplyResult, error) {
	var res ApplyResult
	unique := make([]OrderCreated, 0, len(events))
	seen := make(map[uuid.UUID]bool, len(events))
	for _, e := range events {
		if seen[e.EventID] {
			res.Duplicates++
			continue
		}
		seen[e.EventID] = true
		unique = append(unique, e)
	}
	// Sorted ids and sorted orders give every transaction the same lock
	// order, so two consumers applying overlapping batches during a
	// rebalance wait for each other instead of deadlocking.
	ids := make([]uuid.UUID, len(unique))
	for i, e := range unique {
		ids[i] = e.EventID
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })

	var inTx ApplyResult
	err := uc.db.Transact(ctx, func(ctx context.Context, r Repos) error {
		inTx = ApplyResult{}
		fresh, err := r.ProcessedEvents.MarkProcessed(ctx, uc.consumer, ids)
		if err != nil {
			return err
		}
		newest := make(map[domain.OrderID]OrderCreated)
		for _, e := range unique {
			if !fresh[e.EventID] {
				inTx.Duplicates++
				continue
			}
			cur, ok := newest[e.Order.ID]
			switch {
			case !ok:
				newest[e.Order.ID] = e
			case e.Version().After(cur.Version()):
				inTx.Superseded++ // cur loses to e
				newest[e.Order.ID] = e
			default:
				inTx.Superseded++
			}
		}
		winners := make([]OrderCreated, 0, len(newest))
		for _, e := range newest {
			winners = append(winners, e)
		}
		slices.SortFunc(winners, func(a, b OrderCreated) int { return cmp.Compare(a.Order.ID, b.Order.ID) })
		written, err := r.Orders.UpsertNewer(ctx, winners)
		if err != nil {
			return err
		}
		inTx.Written = written
		inTx.Superseded += len(winners) - written
		return nil
	})
	if err != nil {
		return ApplyResult{}, err
	}
	res.Duplicates += inTx.Duplicates
	res.Superseded = inTx.Superseded
	res.Written = inTx.Written
	return res, nil
}
