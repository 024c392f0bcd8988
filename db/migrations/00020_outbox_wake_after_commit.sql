-- Releases: runs under the previous release and this one; the previous release's writers then wake no relay at their commit, so while they run, a relay finds their events at its poll (OUTBOX_POLL_INTERVAL, 5 s by default) or at the next wake of a current writer, whichever comes first. No event is lost or published twice by it.
--
-- The outbox's NOTIFY trigger (00004) goes: the writers wake the relays
-- after their commit instead (internal/outbox/relay.go, docs/decisions/0027).
--
-- A transaction that has notified takes, at commit, one lock that every
-- notifying transaction of the server shares, and holds it through its
-- WAL flush. With the trigger, every charge's phase 3 notified, so phase 3
-- commits ran one at a time, each with a flush of its own: group commit,
-- which shares one flush among the commits that come together, could not
-- happen. Measured in one run with the trigger disabled (docs/benchmarks.md,
-- "CPU per charge beside the peers"): 0.43 WAL flushes per charge instead
-- of 1.5, about 30 % less machine CPU per charge, and two to three times
-- the charges a second at 16 clients.
--
-- The trigger guaranteed nothing: a notification is a hint, lost while no
-- relay listens, and the relay's poll finds every row. A wake after the
-- commit, one per burst of commits per replica, keeps the hint's latency
-- without putting the lock inside the charges' commits.

-- +goose Up
DROP TRIGGER outbox_event_notify ON outbox_event;
DROP FUNCTION outbox_event_notify();

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION outbox_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_event_notify
    AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_notify();
