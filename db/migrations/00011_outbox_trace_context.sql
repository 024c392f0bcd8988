-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- outbox_event.trace_context: the W3C trace context of the request that
-- wrote the event, so the trace continues across the outbox and the broker.
--
-- The style guide's outbox has no such column; ours keeps it because the
-- relay publishes long after the request has ended, in another goroutine,
-- possibly on another replica: without the row, nothing links the
-- published record to the request that caused it.
--
--   * Written in phase 3's transaction with the rest of the row: the
--     traceparent (and tracestate, when the caller sent one) of the span
--     that recorded the outcome, as a JSON object of the W3C header names,
--     {"traceparent": "00-<trace id>-<span id>-<flags>"}.
--   * NULL when tracing is off or the request was not traced: nothing to
--     carry, and the relay sends no trace headers.
--   * The relay copies the fields into the Kafka record's headers (the W3C
--     names, as the Kafka binding of Trace Context uses them), so consumers
--     of payment.events continue the request's trace, and links its own
--     publish span to it.
--   * json, like payload: read back whole, never queried into.
--
-- Adding a nullable column without a default only changes the catalogue:
-- no table rewrite, no long lock on a live outbox.

-- +goose Up
ALTER TABLE outbox_event ADD COLUMN trace_context json NULL;

-- +goose Down
ALTER TABLE outbox_event DROP COLUMN trace_context;
