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
//
// With PAYMENT_PROVIDER=stripe (`make dev PAYMENT_PROVIDER=stripe`) the
// service charges through Stripe, and the stateful Stripe fake
// (internal/stripefake) stands in for it on the same port, so nothing
// leaves the machine: the service's STRIPE_API_BASE points at it, its API
// key is devStripeKey unless STRIPE_SECRET_KEY says otherwise, and its
// events go to the service's POST /webhooks/stripe, signed with a secret
// generated for the run (STRIPE_WEBHOOK_SECRET replaces it; STRIPE_FAKE_WEBHOOK_URL
// set to the empty string turns them off). STRIPE_FAKE_LATENCY is how long
// each of its POSTs takes, as SANDBOX_LATENCY is the sandbox's. With
// STRIPE_API_BASE set, no fake is started.
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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/demoorders"
	"github.com/example/payment-service/internal/kafkatest"
	"github.com/example/payment-service/internal/pgtemp"
	"github.com/example/payment-service/internal/sandboxprovider"
	"github.com/example/payment-service/internal/service"
	"github.com/example/payment-service/internal/stripefake"
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

// devStripeKey is the Stripe fake's API key in make dev: no secret (the
// fake runs on loopback and holds nothing real), the same every run so that
// the tour can read what the fake holds with it.
const devStripeKey = "sk_test_payment_dev" //nolint:gosec // G101: the dev fake's key, printed on purpose

// devStack is what run started, for its welcome.
type devStack struct {
	addr, dsn, brokers, providerURL string
	// provider is the provider the service charges through: sandbox or
	// stripe (config.ProviderSandbox, config.ProviderStripe).
	provider string
	webhooks webhooks
	// stripe is the Stripe fake run started, if it started one.
	stripe *stripefake.Server
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
	stack := devStack{dsn: dsn, brokers: brokers, provider: envOrDefault("PAYMENT_PROVIDER")}
	if stack.provider == "" {
		stack.provider = config.ProviderSandbox
	}
	stack.webhooks = webhooksFor(envOrDefault("HTTP_ADDR"), stack.provider)
	start := startProvider
	if stack.provider == config.ProviderStripe {
		start = startStripe
	}
	stopProvider, err := start(&stack)
	if err != nil {
		return err
	}
	defer stopProvider()

	cfg, err := config.Load(stack.getenv)
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
	stack.addr = svc.Addr()
	welcome(stack)
	return svc.Run(ctx)
}

// getenv is the service's environment in the dev stack: the stack's own
// database, broker and provider, the webhooks' secret when the stack's
// provider sends them, and otherwise the environment or the dev default.
func (s devStack) getenv(name string) string {
	hooked := s.webhooks.url != "" && s.webhooks.provider != "" && s.providerURL == s.webhooks.provider
	switch {
	case name == "DATABASE_URL":
		return s.dsn
	case name == "KAFKA_BROKERS":
		return s.brokers
	case name == "PAYMENT_PROVIDER":
		return s.provider
	case name == "SANDBOX_PROVIDER_URL" && s.provider == config.ProviderSandbox,
		name == "STRIPE_API_BASE" && s.provider == config.ProviderStripe:
		return s.providerURL
	case name == "STRIPE_SECRET_KEY" && s.stripe != nil:
		return stripeKey()
	case name == "WEBHOOK_SECRETS" && s.provider == config.ProviderSandbox && hooked,
		name == "STRIPE_WEBHOOK_SECRET" && s.provider == config.ProviderStripe && hooked:
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return s.webhooks.secret
	}
	return envOrDefault(name)
}

// stripeKey is the Stripe fake's API key: STRIPE_SECRET_KEY, or
// devStripeKey.
func stripeKey() string {
	if v := os.Getenv("STRIPE_SECRET_KEY"); v != "" {
		return v
	}
	return devStripeKey
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

// webhookSettings are, per provider, the variables that name the dev
// provider's webhook URL and secret, and the service's endpoint for them.
var webhookSettings = map[string]struct{ urlVar, secretVar, path string }{
	config.ProviderSandbox: {"SANDBOX_WEBHOOK_URL", "SANDBOX_WEBHOOK_SECRET", "/webhooks/sandbox"},
	config.ProviderStripe:  {"STRIPE_FAKE_WEBHOOK_URL", "STRIPE_WEBHOOK_SECRET", "/webhooks/stripe"},
}

// webhooksFor points the dev provider's webhooks (the sandbox's, or the
// Stripe fake's) at the service listening on addr, with a secret of its
// own unless the environment names one.
func webhooksFor(addr, provider string) webhooks {
	set, ok := webhookSettings[provider]
	if !ok {
		return webhooks{} // config.Load will refuse the provider, saying why
	}
	w := webhooks{secret: os.Getenv(set.secretVar)}
	if w.secret == "" {
		w.secret = "whsec_dev_" + rand.Text()
	}
	if url, ok := os.LookupEnv(set.urlVar); ok {
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
	w.url = "http://" + net.JoinHostPort(host, port) + set.path
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
	provider := "(sandbox payment provider; what it charged: " + s.providerURL + "/v1/ledger)"
	charge := `"paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"`
	if s.provider == config.ProviderStripe {
		provider = "(Stripe, an external one)"
		if s.stripe != nil {
			provider = "(the Stripe fake, on loopback; its PaymentIntents: curl -H 'Authorization: Bearer " + stripeKey() + "' " + s.providerURL + "/v1/payment_intents)"
		}
		charge = `"paymentProvider":"stripe","externalPaymentId":"pi_demo_1","paymentMethod":"pm_card_visa"`
	}
	fmt.Fprintf(os.Stderr, `
payment-dev is up (Ctrl-C stops it and removes the data).

  API       http://%[1]s   (API key: demo-secret; the saga's payments: saga-secret)
  health    http://%[1]s/healthz  http://%[1]s/readyz  http://%[1]s/metrics
  database  psql '%[2]s'
  kafka     %[3]s   (topics %[6]s)
  provider  %[4]s   %[7]s
  webhooks  %[5]s
  orders    1001 (customer 42, 100.50 RUB), 1002 (customer 42, 2500.00 RUB), 1003 (customer 7, 19.99 EUR)

Charge order 1001:

  curl -i http://%[1]s/payments \
    -H 'Authorization: Bearer demo-secret' \
    -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: demo-key-1' \
    -d '{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB",%[8]s}'

Then, in another terminal, the whole walk-through with a Kafka event and a
saga step by command:

  make demo

`, s.addr, s.dsn, s.brokers, s.providerURL, s.webhooks.line(), topicNames(), provider, charge)
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
// loopback, sending the stack's webhooks, unless SANDBOX_PROVIDER_URL names
// a provider to use instead; it sets the stack's providerURL. stop is
// never nil.
func startProvider(stack *devStack) (stop func(), err error) {
	hooks := &stack.webhooks
	addr, external, err := providerAddr(stack, "SANDBOX_PROVIDER_URL")
	if err != nil || external {
		return func() {}, err
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
		return nil, err
	}
	srv, err := sandboxprovider.Start(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("start the sandbox payment provider (set DEV_PROVIDER_PORT to move it): %w", err)
	}
	hooks.provider, stack.providerURL = srv.URL, srv.URL
	return func() { _ = srv.Close() }, nil
}

// startStripe starts the stateful Stripe fake on loopback in Stripe's
// place, sending the stack's webhooks, unless STRIPE_API_BASE names a
// Stripe to use instead; it sets the stack's providerURL and stripe. stop
// is never nil.
func startStripe(stack *devStack) (stop func(), err error) {
	hooks := &stack.webhooks
	addr, external, err := providerAddr(stack, "STRIPE_API_BASE")
	if err != nil || external {
		return func() {}, err
	}
	cfg := stripefake.Config{SecretKey: stripeKey(), WebhookURL: hooks.url, WebhookSecret: hooks.secret, WebhookRetryFor: 10 * time.Minute}
	if v := os.Getenv("STRIPE_FAKE_LATENCY"); v != "" {
		if cfg.Latency, err = time.ParseDuration(v); err != nil || cfg.Latency < 0 {
			return nil, fmt.Errorf("STRIPE_FAKE_LATENCY: must be a duration, such as 3s; got %q", v)
		}
	}
	fake, err := stripefake.Start(addr, cfg)
	if err != nil {
		return nil, fmt.Errorf("start the Stripe fake (set DEV_PROVIDER_PORT to move it): %w", err)
	}
	hooks.provider, stack.providerURL, stack.stripe = fake.URL, fake.URL, fake
	return func() { _ = fake.Close() }, nil
}

// providerAddr is where the dev provider is to listen: 127.0.0.1:8081, or
// DEV_PROVIDER_PORT; or, when externalVar names a provider to use instead,
// none (external), that provider's URL then the stack's.
func providerAddr(stack *devStack, externalVar string) (addr string, external bool, err error) {
	if url := os.Getenv(externalVar); url != "" {
		stack.providerURL = url
		return "", true, nil
	}
	port := 8081
	if v := os.Getenv("DEV_PROVIDER_PORT"); v != "" {
		if port, err = strconv.Atoi(v); err != nil {
			return "", false, fmt.Errorf("DEV_PROVIDER_PORT: %w", err)
		}
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), false, nil
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
