-- Releases: applied before the previous release (deploy/previous-release); every release since runs against it.
--
-- GET /orders/{orderId} shows an order only to a client that has a payment
-- for it: EXISTS (SELECT 1 FROM payment WHERE order_id = $1 AND
-- client_id = $2). Without an index on order_id every such read scans
-- payment. CONCURRENTLY, so building it blocks no charge; that
-- needs the migration to run outside a transaction.

-- A build CONCURRENTLY that fails leaves an invalid index behind, which
-- IF NOT EXISTS would keep: each index is dropped first, so a rerun builds
-- it anew.

-- +goose NO TRANSACTION

-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_order_client;
CREATE INDEX CONCURRENTLY ix_payment_order_client ON payment (order_id, client_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ix_payment_order_client;
