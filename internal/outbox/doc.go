// Package outbox is the relay of the transactional outbox: it publishes the
// events that use cases wrote to the outbox_event table, after their
// transaction committed, and marks them published.
//
// Guarantees and where they come from:
//
//   - At least once. An event is marked published only after the broker
//     acknowledged it (acks=all). A relay that dies after publishing and
//     before marking leaves the rows unpublished; the next leader publishes
//     them again with the same eventId (it is stored in the row, generated
//     once when the row was written), and consumers drop the copy in their
//     processed_event table (R-DIST-IDEM-2). The idempotent producer
//     (R-DIST-IDEM-X2) keeps its own retries from duplicating; it cannot
//     help across a process restart, which is what the eventId is for.
//   - One relay at a time. A replica publishes only while it is the leader:
//     it holds a PostgreSQL session-level advisory lock on a dedicated
//     connection (Store.Lead). When that session ends (process crash,
//     network loss, pg_terminate_backend), PostgreSQL releases the lock and
//     a standby, blocked in the same lock, takes over at once. All of the
//     leader's reads and writes go through that same session, so a leader
//     whose session died can neither read a new batch nor mark one. The
//     one window left: a batch already read when the session dies may still
//     be in flight while the new leader publishes the same rows. That costs
//     duplicates with the same eventIds, never a lost event.
//   - Order. Rows are published in id order, one batch at a time, and each
//     batch is handed to the producer in that order; the producer keeps the
//     order per partition, and the message key (the order id) picks the
//     partition. So one key's events appear on the topic in the order of
//     their outbox ids. Ids are taken at insert, not at commit: events of
//     two concurrent transactions may commit, and be published, in the
//     opposite order of their ids; they were concurrent, so neither order
//     is wrong, and no row is ever skipped (the relay always reads the
//     oldest unpublished rows, not "after the last id").
//   - Latency. A writer's commit wakes the relays: the replica's Waker
//     sends a NOTIFY after the commit, at most one per WakeGap (decision
//     0027; migration 00020 dropped the trigger that notified inside the
//     transaction); the leader LISTENs on its session and wakes at once. A
//     slow poll (PollInterval) is the safety net for notifications lost
//     while no leader was listening.
//   - Every row reaches the topic stored in it. The relay reads the
//     unpublished rows of every topic and publishes each to its row's
//     topic (PAYMENT_EVENTS_TOPIC as it was when the row was written), with
//     one producer per topic. A batch's topics are published at once, each
//     topic's rows in id order, and the batch is marked only once every
//     topic acknowledged its rows: a topic that fails leaves the whole
//     batch unpublished, and the retry sends the others' rows again with
//     the same eventIds. Changing the variable, or a rolling rename
//     with replicas writing both topics, strands nothing. The one
//     precondition: a topic must exist until its last row is published
//     (SELECT topic, count(*) FROM outbox_event WHERE published_at IS NULL
//     GROUP BY topic); publishing to a deleted topic fails, loudly and
//     without limit (lag and health), and holds up the rows behind it. One
//     relay leads per database, whatever topic it is configured with.
//   - No network call inside a database transaction: read a batch
//     (autocommit), publish it, then mark it published (autocommit).
//   - Bounded retries against a failing broker. A failed publish is
//     retried after a pause that doubles with each failure in a row (from
//     min(PollInterval, 1s) up to 30s, with jitter) and starts over after a
//     published batch. The producer is kept across failures and replaced
//     only when it stopped for good (fenced): each new producer costs the
//     broker a producer id held in its memory, and building one per failure
//     made thousands during a long outage.
package outbox
