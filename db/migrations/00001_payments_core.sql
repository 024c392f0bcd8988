-- Releases: the first schema; every release runs against it.
--
-- Payments core: the order projection the charge is checked against, the
-- payment table (second idempotency layer, R-DIST-IDEM-4) and the
-- idempotency_record table (first layer, R-DIST-IDEM-3).

-- +goose Up

-- order_projection is this service's local view of orders. The
-- order-projection consumer fills it from order.events; until then tests and
-- the dev stack insert rows directly. A charge must match its order's
-- customer, amount and currency. saga_id, when the order event carried one,
-- is copied onto the payment events so the saga can follow them.
CREATE TABLE order_projection (
    order_id     bigint        PRIMARY KEY CHECK (order_id > 0),
    customer_id  bigint        NOT NULL CHECK (customer_id > 0),
    amount       numeric(19,4) NOT NULL CHECK (amount > 0),
    currency     char(3)       NOT NULL,
    saga_id      uuid,
    updated_at   timestamptz   NOT NULL DEFAULT now()
);

-- payment follows the style guide's table (R-DIST-IDEM-4) with these
-- deviations:
--   * client_id: payments are scoped to the API client that made them, so one
--     client can never read another's payment. (The UNIQUE pair below is not
--     per client; the one thing it tells another client is that an external
--     payment id is in use: docs/design.md, "Per-client scope".)
--   * order_id, customer_id, currency: the guide's table has only amount; a
--     payment is checked against its order and the second layer compares
--     them when a new key arrives for a known external payment.
--   * status PENDING: the row is reserved before the provider is called, so
--     the UNIQUE constraint below also stops two different keys from calling
--     the provider for one external payment at the same time, and a crashed
--     request leaves a recovery point that a retry resumes.
--   * updated_at: when the status last changed.
-- No foreign key to order_projection: the projection is a read model that
-- the consumer may rebuild; a payment must outlive that.
CREATE TABLE payment (
    id                   bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id            text          NOT NULL,
    order_id             bigint        NOT NULL CHECK (order_id > 0),
    customer_id          bigint        NOT NULL CHECK (customer_id > 0),
    payment_provider     text          NOT NULL,
    external_payment_id  text          NOT NULL CHECK (length(external_payment_id) BETWEEN 1 AND 128),
    amount               numeric(19,4) NOT NULL CHECK (amount > 0),
    currency             char(3)       NOT NULL,
    status               text          NOT NULL CHECK (status IN ('PENDING', 'SUCCEEDED', 'DECLINED')),
    created_at           timestamptz   NOT NULL DEFAULT now(),
    updated_at           timestamptz   NOT NULL DEFAULT now(),
    -- R-DIST-IDEM-4: the second layer. Whatever the idempotency keys say, one
    -- external payment is one row.
    CONSTRAINT payment_provider_external_payment_id_key UNIQUE (payment_provider, external_payment_id)
);

-- idempotency_record keeps the style guide's name and columns
-- (idempotency_key, command_hash, response, http_status, created_at) with
-- these deviations:
--   * client_id, part of the primary key: keys are scoped per API client, so
--     two clients that pick the same key get two independent records, and
--     one client can never replay another's response.
--   * status IN_PROGRESS | COMPLETED, lock_token, locked_until: the claim on
--     a key is an atomic insert-if-absent made before the command runs.
--     While IN_PROGRESS, a duplicate gets 409 request-in-progress. The lock
--     expires, so a request that crashed does not hold the key forever: a
--     retry after locked_until takes the claim over with a new lock_token.
--     Completion is fenced by lock_token, so a request whose lock was taken
--     over can never overwrite the new owner's outcome.
--   * response and http_status are NULL while IN_PROGRESS (the guide stores
--     the record only after the command, which is the race this avoids).
--   * response is json, not jsonb: json keeps the exact bytes that were sent,
--     so a replay is byte-identical; jsonb would reorder keys and whitespace.
--   * payment_id: the recovery point. Once the payment row is reserved, a
--     retry that takes over the key resumes that payment instead of starting
--     a new one.
--   * updated_at: when the claim or the outcome last changed.
CREATE TABLE idempotency_record (
    client_id        text        NOT NULL,
    idempotency_key  text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    command_hash     text        NOT NULL,
    status           text        NOT NULL CHECK (status IN ('IN_PROGRESS', 'COMPLETED')),
    response         json,
    http_status      int,
    payment_id       bigint      REFERENCES payment (id),
    lock_token       uuid,
    locked_until     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, idempotency_key),
    CONSTRAINT idempotency_record_outcome_when_completed
        CHECK ((status = 'COMPLETED') = (response IS NOT NULL AND http_status IS NOT NULL)),
    CONSTRAINT idempotency_record_lock_when_in_progress
        CHECK ((status = 'IN_PROGRESS') = (lock_token IS NOT NULL AND locked_until IS NOT NULL))
);

-- The TTL cleanup (R-DIST-IDEM-5) deletes by age.
CREATE INDEX ix_idempotency_record_created_at ON idempotency_record (created_at);

-- +goose Down
DROP TABLE idempotency_record;
DROP TABLE payment;
DROP TABLE order_projection;
