// Command payment-dev runs the payment service with no Docker: a throwaway
// PostgreSQL from the local binaries (internal/pgtemp, the same helper the
// tests use), migrated and seeded with demo orders; an in-process
// Kafka-protocol broker (kfake, internal/kafkatest) on 127.0.0.1:9092 with
// the service's topics; the sandbox payment provider's HTTP server
// (internal/sandboxprovider) on 127.0.0.1:8081; and the service on
// 127.0.0.1:8080 with the demo API keys (the demo client's, and the saga
// client's, which reads the payments of the saga's steps), charging through
// that provider over HTTP, with its order consumer, saga commands consumer
// and outbox relay running against that broker. Ctrl-C stops everything
// and removes the data. It is what `make dev` runs; it is not the
// production binary, which does not link kfake.
//
// Any variable the service reads (docs/operations.md) can still be set to override
// the dev defaults, except DATABASE_URL, which always points at the
// throwaway cluster. With KAFKA_BROKERS set, no broker is started and the
// service uses those brokers; with SANDBOX_PROVIDER_URL set, no provider is
// started. DEV_KAFKA_PORT and DEV_PROVIDER_PORT move the in-process broker
// and provider; SANDBOX_LATENCY, SANDBOX_SLOW_DELAY, SANDBOX_FAULT_RATES and
// SANDBOX_FAULT_SEED tune the provider (internal/sandboxprovider).
//
// The provider sends its webhooks to the service's POST /webhooks/sandbox,
// signed with a secret generated for the run, which the service is given
// as WEBHOOK_SECRETS: a lost call answer is resolved by the webhook. The
// secret is never printed. SANDBOX_WEBHOOK_URL set to the empty string
// turns the webhooks off (the completer alone then settles what a lost
// answer leaves); SANDBOX_WEBHOOK_SECRET, or WEBHOOK_SECRETS for the
// service, replace the generated secret; the other SANDBOX_WEBHOOK_*
// variables tune the deliveries and their faults.
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/demoorders"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/pgtemp"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
)

// devDefaults are the dev stack's settings where the environment says
// nothing. The saga client (SAGA_CLIENT_ID's default) has a key so that the
// tour can read the payment a saga step made over HTTP; the demo's client
// reads reconciliation's endpoints, and reconciliation runs every 10
// seconds over the last day, so the tour sees a run find an item and the
// next close it.
var devDefaults = map[string]string{
	"HTTP_ADDR":                "127.0.0.1:8080",
	"API_KEYS":                 "demo-client:demo-secret,saga:saga-secret",
	"OPERATOR_CLIENTS":         "demo-client",
	"RECONCILE_CRON":           "*/10 * * * * *",
	"RECONCILE_WINDOW":         "24h",
	"RECONCILE_SETTLEMENT_LAG": "2s",
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, printWelcome); err != nil {
		fmt.Fprintln(os.Stderr, "payment-dev:", err)
		os.Exit(1)
	}
}

// devStack is what run started, for its welcome.
type devStack struct {
	addr, dsn, brokers, providerURL string
	webhooks                        webhooks
}

// run starts the stack, calls welcome once the service is built (it
// listens, and serves once Run starts), and runs the service until ctx
// ends.
func run(ctx context.Context, welcome func(devStack)) error {
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

	brokers, stopBroker, err := startBroker(ctx)
	if err != nil {
		return err
	}
	defer stopBroker()
	hooks := webhooksFor(envOrDefault("HTTP_ADDR"))
	providerURL, stopProvider, err := startProvider(&hooks)
	if err != nil {
		return err
	}
	defer stopProvider()

	getenv := func(name string) string {
		switch name {
		case "DATABASE_URL":
			return dsn
		case "KAFKA_BROKERS":
			return brokers
		case "SANDBOX_PROVIDER_URL":
			return providerURL
		}
		if name == "WEBHOOK_SECRETS" && providerURL == hooks.provider && hooks.url != "" {
			if v, ok := os.LookupEnv(name); ok {
				return v
			}
			return hooks.secret
		}
		return envOrDefault(name)
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
	welcome(devStack{addr: svc.Addr(), dsn: dsn, brokers: brokers, providerURL: providerURL, webhooks: hooks})
	return svc.Run(ctx)
}

// envOrDefault is the environment's value of name, or the dev default.
func envOrDefault(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return devDefaults[name]
}

// webhooks is how the dev provider reports its decisions to the service.
type webhooks struct {
	url    string // the service's endpoint; empty: no webhooks
	secret string // shared by the provider and the service
	// provider is the URL of the provider started with these webhooks
	// (set by startProvider): an external provider does not send them.
	provider string
}

// line is what the welcome says of the webhooks.
func (w webhooks) line() string {
	if w.url == "" || w.provider == "" {
		return "off"
	}
	return w.url + "   (the provider reports each decision there, signed; the secret is never shown)"
}

// webhooksFor points the dev provider's webhooks at the service listening
// on addr, with a secret of its own unless the environment names one.
func webhooksFor(addr string) webhooks {
	w := webhooks{secret: os.Getenv("SANDBOX_WEBHOOK_SECRET")}
	if w.secret == "" {
		w.secret = "whsec_dev_" + rand.Text()
	}
	if url, ok := os.LookupEnv("SANDBOX_WEBHOOK_URL"); ok {
		w.url = url
		return w
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return w // config.Load will refuse the address, saying why
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	w.url = "http://" + net.JoinHostPort(host, port) + "/webhooks/sandbox"
	return w
}

// seed writes the tour's orders (docs/tour.md, internal/demoorders) into
// order_projection, so a newcomer can charge one at once; compose, which
// has no such shortcut, publishes them as events instead.
func seed(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, o := range demoorders.Tour {
		_, err := conn.Exec(ctx,
			`INSERT INTO order_projection (order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4)
			 ON CONFLICT (order_id) DO NOTHING`, o.ID, o.CustomerID, o.Amount, o.Currency)
		if err != nil {
			return fmt.Errorf("seed demo orders: %w", err)
		}
	}
	return nil
}

func printWelcome(s devStack) {
	fmt.Fprintf(os.Stderr, `
payment-dev is up (Ctrl-C stops it and removes the data).

  API       http://%[1]s   (API key: demo-secret; the saga's payments: saga-secret)
  health    http://%[1]s/healthz  http://%[1]s/readyz  http://%[1]s/metrics
  database  psql '%[2]s'
  kafka     %[3]s   (topics %[6]s)
  provider  %[4]s   (sandbox payment provider; what it charged: %[4]s/v1/ledger)
  webhooks  %[5]s
  orders    1001 (customer 42, 100.50 RUB), 1002 (customer 42, 2500.00 RUB), 1003 (customer 7, 19.99 EUR)

Charge order 1001:

  curl -i http://%[1]s/payments \
    -H 'Authorization: Bearer demo-secret' \
    -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: demo-key-1' \
    -d '{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"}'

Then, in another terminal, the whole walk-through with a Kafka event and a
saga step by command:

  make demo

`, s.addr, s.dsn, s.brokers, s.providerURL, s.webhooks.line(), topicNames())
}

// devTopics are the topics the service uses, with their partitions (as in
// docker-compose.yml's kafka-init): the order events and their dead
// letters, the payment events, and the saga's commands, their dead letters
// and its replies. The broker creates no topic by itself (nor does
// compose's), so each is made here, before the service starts.
var devTopics = []struct {
	name       string
	partitions int
}{
	{"order.events", 3},
	{"order.events.DLT", 1},
	{"payment.events", 3},
	{"payment.commands", 3},
	{"payment.commands.DLT", 1},
	{"payment.replies", 3},
}

// topicNames lists devTopics for the welcome.
func topicNames() string {
	names := make([]string, len(devTopics))
	for i, t := range devTopics {
		names[i] = t.name
	}
	return strings.Join(names, ", ")
}

// startBroker starts the in-process broker with the service's topics, unless
// KAFKA_BROKERS names brokers to use instead.
func startBroker(ctx context.Context) (brokers string, stop func(), err error) {
	if external := os.Getenv("KAFKA_BROKERS"); external != "" {
		return external, func() {}, nil
	}
	port := 9092
	if v := os.Getenv("DEV_KAFKA_PORT"); v != "" {
		if port, err = strconv.Atoi(v); err != nil {
			return "", nil, fmt.Errorf("DEV_KAFKA_PORT: %w", err)
		}
	}
	c, addrs, err := kafkatest.StartInProcess(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		return "", nil, fmt.Errorf("start the in-process Kafka broker on 127.0.0.1:%d (set DEV_KAFKA_PORT to move it): %w", port, err)
	}
	for _, t := range devTopics {
		if err := kafkatest.CreateTopicContext(ctx, addrs, t.name, t.partitions); err != nil {
			c.Close()
			return "", nil, err
		}
	}
	return strings.Join(addrs, ","), c.Close, nil
}

// startProvider starts the sandbox payment provider's HTTP server on
// loopback, sending hooks, unless SANDBOX_PROVIDER_URL names a provider to
// use instead.
func startProvider(hooks *webhooks) (url string, stop func(), err error) {
	if external := os.Getenv("SANDBOX_PROVIDER_URL"); external != "" {
		return external, func() {}, nil
	}
	port := 8081
	if v := os.Getenv("DEV_PROVIDER_PORT"); v != "" {
		if port, err = strconv.Atoi(v); err != nil {
			return "", nil, fmt.Errorf("DEV_PROVIDER_PORT: %w", err)
		}
	}
	cfg, err := sandboxprovider.ConfigFromEnv(func(name string) string {
		switch name {
		case "SANDBOX_WEBHOOK_URL":
			return hooks.url
		case "SANDBOX_WEBHOOK_SECRET":
			return hooks.secret
		}
		return os.Getenv(name)
	})
	if err != nil {
		return "", nil, err
	}
	srv, err := sandboxprovider.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cfg)
	if err != nil {
		return "", nil, fmt.Errorf("start the sandbox payment provider (set DEV_PROVIDER_PORT to move it): %w", err)
	}
	hooks.provider = srv.URL
	return srv.URL, func() { _ = srv.Close() }, nil
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
