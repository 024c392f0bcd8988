// Package idempotent is an idempotent Kafka producer built on kafka-go's
// protocol layer.
//
// Rule R-DIST-IDEM-X2 requires the service's producer to be exactly-once on
// its side: enable.idempotence=true, acks=all,
// max.in.flight.requests.per.connection<=5 and effectively unbounded retries.
// kafka-go's Writer cannot be idempotent (segmentio/kafka-go#233): it never
// sets a producer id or sequence numbers, so a batch resent after a lost
// acknowledgement is appended twice. This package does what the Java
// client's idempotent producer does, with kafka-go's Client:
//
//   - it obtains a producer id and epoch with InitProducerID (no
//     transactional id);
//   - it numbers the records of each partition with a sequence that starts
//     at 0 and advances by the record count of each acknowledged batch;
//   - it encodes each batch once (protocol.RecordSet v2), stamps the producer
//     id, epoch and base sequence into the batch header and sends it with
//     RawProduce and acks=all;
//   - on any failure whose outcome is unknown (network error, timeout, lost
//     response, retriable broker error) it resends the same bytes with the
//     same sequence, so the broker answers a duplicate with the original
//     offset (or DUPLICATE_SEQUENCE_NUMBER) instead of appending it again.
//
// In flight: each partition has at most one batch in flight at a time, and
// batches of one partition are sent strictly one after the other. That keeps
// the sequence bookkeeping trivially correct (no out-of-order completions to
// reconcile) and satisfies max.in.flight<=5 by construction; different
// partitions are sent concurrently.
//
// Retries: a batch is retried until it is acknowledged or the caller's
// context ends; there is no retry count (the rule's retries=2147483647).
// Each attempt is bounded by Config.RequestTimeout, and attempts are spaced
// by an exponential backoff.
//
// Sequence errors (what the broker can answer and what we do), following the
// Java client's handling for a non-transactional idempotent producer
// (TransactionManager.canRetry / handleFailedBatch, KIP-360):
//
//   - A resent batch the broker already holds: current brokers answer with
//     success and the batch's original offset, older ones with
//     DUPLICATE_SEQUENCE_NUMBER. Both are the success this design exists
//     for; the batch is acknowledged.
//   - OUT_OF_ORDER_SEQUENCE_NUMBER: because only one batch per partition is
//     ever in flight and the sequence only advances on acknowledgement, the
//     batch we sent is always the one the broker should expect next. The
//     error therefore means the broker's state for us no longer matches ours
//     (it lost records or producer state, e.g. after an unclean leader
//     election). No resend with any sequence can be proven safe, so, as the
//     Java client does, we abandon the old sequence space and retry the batch
//     in a new one. The Java client bumps the epoch locally; we ask the
//     broker for a fresh producer id instead (see acquireIdentity for why).
//   - UNKNOWN_PRODUCER_ID: the broker has no state for our producer id on
//     that partition (retention removed it). Same recovery as above.
//   - What can still duplicate after either error: an earlier attempt of the
//     very same batch was appended, its acknowledgement was lost, and then
//     the broker lost the state that would have recognised the resend. The
//     protocol gives no way to tell; the Java client accepts the same risk.
//   - PRODUCER_FENCED: fatal, as in the Java client. Nothing else should hold
//     our producer id, so continuing would risk interleaving with another
//     writer. Every later Publish returns the error, marked ErrFatal; the
//     caller must build a new Producer.
//   - INVALID_PRODUCER_EPOCH: this attempt was rejected and appended
//     nothing. The Java client, as we read it, fails such a batch for a
//     non-transactional producer (the error is not retriable); so does
//     Publish, and the partition starts a fresh sequence space for the next
//     batch.
//   - Retriable errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
//     REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), ...): resend the
//     same bytes after a backoff. Some of them are sent after the broker
//     appended the batch, which the sequence makes harmless.
//   - Any other broker error (MESSAGE_TOO_LARGE, authorization, ...): the
//     Publish fails, marked ErrRefused (the same records will be refused
//     again; the producer stays usable); the batch was refused, so its
//     sequence numbers are free again unless an earlier attempt's outcome
//     was unknown.
//
// Leaders: kafka-go's Transport routes each produce request to the
// partition leader from its metadata cache, which it refreshes every
// Config.MetadataTTL at most. After a leader change, attempts answered
// NOT_LEADER_OR_FOLLOWER are retried until the cache has caught up.
//
// When Publish returns an error, each of its messages may or may not have
// been written: the caller cannot tell the difference between "rejected" and
// "written but the acknowledgement never arrived". A partition whose last
// batch ended that way never reuses that batch's sequence numbers for other
// records, because the broker would take a different batch with the same
// sequence numbers for a retry and silently drop it. It starts a fresh
// sequence space instead.
package idempotent
