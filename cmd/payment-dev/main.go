// Command payment-dev runs the payment service with no Docker: a throwaway
// PostgreSQL from the local binaries (internal/pgtemp, the same helper the
// tests use), migrated and seeded with demo orders, and the service on
// 127.0.0.1:8080 with the demo API key. Ctrl-C stops everything and removes
// the data. It is what `make dev` runs; it is not the production binary.
//
// Any variable the service reads (README.md) can still be set to override
// the dev defaults, except DATABASE_URL, which always points at the
// throwaway cluster.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/pgtemp"
	"github.com/example/payment-service/internal/service"
)

// devDefaults are the dev stack's settings where the environment says nothing.
var devDefaults = map[string]string{
	"HTTP_ADDR": "127.0.0.1:8080",
	"API_KEYS":  "demo-client:demo-secret",
}

// demoOrders are in order_projection from the start, so a newcomer can
// charge one at once (see README.md).
var demoOrders = []struct {
	id, customer int64
	amount       string
	currency     string
}{
	{1001, 42, "100.50", "RUB"},
	{1002, 42, "2500.00", "RUB"},
	{1003, 7, "19.99", "EUR"},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "payment-dev:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "payment-dev: starting a throwaway PostgreSQL ...")
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{TCPPort: port})
	if err != nil {
		return err
	}
	defer func() {
		cluster.Stop()
		fmt.Fprintln(os.Stderr, "payment-dev: stopped; the throwaway database is removed")
	}()
	dsn := cluster.DSN("postgres")

	getenv := func(name string) string {
		if name == "DATABASE_URL" {
			return dsn
		}
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return devDefaults[name]
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if err := migrations.Up(ctx, dsn); err != nil {
		return err
	}
	if err := seed(ctx, dsn); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	svc, err := service.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	printWelcome(svc.Addr(), dsn)
	return svc.Run(ctx)
}

func seed(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, o := range demoOrders {
		_, err := conn.Exec(ctx,
			`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4)
			 ON CONFLICT (order_id) DO NOTHING`, o.id, o.customer, o.amount, o.currency)
		if err != nil {
			return fmt.Errorf("seed demo orders: %w", err)
		}
	}
	return nil
}

func printWelcome(addr, dsn string) {
	fmt.Fprintf(os.Stderr, `
payment-dev is up (Ctrl-C stops it and removes the data).

  API       http://%[1]s   (API key: demo-secret)
  health    http://%[1]s/healthz  http://%[1]s/readyz  http://%[1]s/metrics
  database  psql '%[2]s'
  orders    1001 (customer 42, 100.50 RUB), 1002 (customer 42, 2500.00 RUB), 1003 (customer 7, 19.99 EUR)

Charge order 1001:

  curl -i http://%[1]s/payments \
    -H 'Authorization: Bearer demo-secret' \
    -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: demo-key-1' \
    -d '{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"}'

`, addr, dsn)
}

// freePort asks the kernel for a free loopback port for PostgreSQL.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return strconv.Atoi(port)
}
