// Package config reads the service's configuration from the environment,
// once, at start-up. Adapters never read the environment themselves; they
// get what they need from Config.
//
// Each variable is parsed by hand with a small helper rather than through
// struct tags, so that every error names the variable that is wrong
// ("IDEMPOTENCY_LOCK_TIMEOUT: ..."), which is what an operator needs.
package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config is the service's whole configuration.
type Config struct {
	// DatabaseURL (DATABASE_URL, required) is a PostgreSQL connection string.
	DatabaseURL string
	// DatabaseMaxConns (DATABASE_MAX_CONNS, default 20) caps the pool.
	DatabaseMaxConns int
	// HTTPAddr (HTTP_ADDR, default ":8080") is the listen address.
	HTTPAddr string
	// APIKeys (API_KEYS, required) are the clients allowed to call the API,
	// given as client:key pairs separated by commas. Client names and keys
	// are each unique.
	APIKeys []APIKey
	// MigrateOnStart (MIGRATE_ON_START, default false) applies pending
	// migrations before serving.
	MigrateOnStart bool
	// IdempotencyLockTimeout (IDEMPOTENCY_LOCK_TIMEOUT, default 30s) is how
	// long a claimed key blocks duplicates before a retry may take it over.
	// It must exceed the slowest provider call.
	IdempotencyLockTimeout time.Duration
	// PaymentProvider (PAYMENT_PROVIDER, default sandbox) is the provider
	// the service charges through: sandbox or stripe (ProviderSandbox,
	// ProviderStripe). A request names it in paymentProvider.
	PaymentProvider string
	// SandboxProviderURL (SANDBOX_PROVIDER_URL, required with the sandbox)
	// is the base URL of the sandbox payment provider's HTTP API
	// (cmd/sandbox-provider).
	SandboxProviderURL string
	// SandboxModifications (SANDBOX_PROVIDER_MODIFICATIONS, default
	// at-once) is how the sandbox answers captures, refunds and voids, as
	// it is run (its SANDBOX_MODIFICATIONS): at-once, or received (202,
	// decided later and announced by its signed event; the service then
	// answers 202 with the pending capture, void or refund). A sandbox
	// that answers "received" to a service told at-once leaves each such
	// modification an unknown outcome until its event.
	SandboxModifications string
	// Stripe (STRIPE_*, stripe.go) configures Stripe, with
	// PAYMENT_PROVIDER=stripe.
	Stripe Stripe
	// ProviderTimeout (PROVIDER_TIMEOUT, default 10s) bounds one provider
	// call, answer included; it must be shorter than the idempotency lock.
	// ProviderConnectTimeout (PROVIDER_CONNECT_TIMEOUT, default 2s or
	// PROVIDER_TIMEOUT if shorter) bounds connecting; a call that could not
	// connect charged nothing.
	ProviderTimeout        time.Duration
	ProviderConnectTimeout time.Duration
	// ProviderMaxRequestAge (PROVIDER_MAX_REQUEST_AGE) is the sandbox
	// provider's request bound, an ability of that provider and of no real
	// one: every request declares it (Request-Max-Age) and the sandbox
	// refuses a request older than it, so a resumed charge or refund that
	// the sandbox refused for good, and under whose key it holds nothing,
	// is recorded FAILED once this long has passed since its claim. Unset,
	// it follows the lock and the provider timeout: 10s, or
	// IDEMPOTENCY_LOCK_TIMEOUT minus PROVIDER_TIMEOUT if that is shorter,
	// so the attempt can always wait it out under its own lock; set, it
	// must fit there too.
	ProviderMaxRequestAge time.Duration
	// ShutdownTimeout (SHUTDOWN_TIMEOUT, default 15s) bounds the graceful
	// shutdown: in-flight requests get this long to finish. It may be
	// shorter than a charge can take (ProviderTimeout plus recording; the
	// lock runs IdempotencyLockTimeout), and is by default, to fit an
	// orchestrator's usual 30s: a charge still running at the bound is
	// aborted and its key left claimed with its PENDING payment, as after a
	// lost provider answer, for the client's retry or the completer; the
	// pool never closes under it (service.drainCharges). Set it above
	// ProviderTimeout plus a few seconds to let every charge finish
	// in-process.
	ShutdownTimeout time.Duration
	// The other stages of the shutdown have bounds of their own, so that
	// no stage spends another's time (service.Run):
	// ShutdownJobsTimeout (SHUTDOWN_JOBS_TIMEOUT, default 5s) for the
	// scheduled jobs and ShutdownConsumerTimeout
	// (SHUTDOWN_CONSUMER_TIMEOUT, default 5s) for the order consumer, both
	// running next to the HTTP drain; then ShutdownRelayTimeout
	// (SHUTDOWN_RELAY_TIMEOUT, default 3s), once every writer has stopped,
	// for the outbox relay to publish what they committed. What it leaves
	// unpublished waits in the outbox for the next leader.
	ShutdownJobsTimeout     time.Duration
	ShutdownConsumerTimeout time.Duration
	ShutdownRelayTimeout    time.Duration
	// LogLevel (LOG_LEVEL, default info): debug, info, warn or error.
	LogLevel slog.Level
	// KafkaBrokers (KAFKA_BROKERS, optional) lists host:port pairs; used by
	// the Kafka consumer and producer.
	KafkaBrokers []string
	// DebugAddr (DEBUG_ADDR, default off) serves net/http/pprof on a
	// listener of its own, never on the API's, for profiling. Bind it to
	// loopback: profiles show internals.
	DebugAddr string

	// Retention jobs (internal/jobs); parsed in retention.go.
	Retention Retention
	// ReplayCache is the replica's cache of completed keys
	// (replay_cache.go).
	ReplayCache ReplayCache
	// Reconciliation is the reconciliation job's (reconciliation.go).
	Reconciliation Reconciliation
	// OperatorClients (OPERATOR_CLIENTS, default none) are the clients of
	// API_KEYS that may read the operators' endpoints
	// (/reconciliation/...): every payment's, whichever client made it.
	OperatorClients []string

	// Outbox relay (internal/outbox); it runs only when KafkaBrokers is set.

	// PaymentEventsTopic (PAYMENT_EVENTS_TOPIC, default "payment.events")
	// receives PaymentSucceeded.v1 and PaymentDeclined.v1.
	PaymentEventsTopic string
	// OutboxBatchSize (OUTBOX_BATCH_SIZE, default 100, at most 10000) is how
	// many outbox rows the relay reads and publishes at once.
	OutboxBatchSize int
	// OutboxPollInterval (OUTBOX_POLL_INTERVAL, default 5s) is the relay's
	// safety-net poll; commits wake it at once through LISTEN/NOTIFY.
	OutboxPollInterval time.Duration
	// Webhooks configures the provider's signed events (webhooks.go).
	Webhooks Webhooks
	// AuthorizationCheckAfter (AUTHORIZATION_CHECK_AFTER, default 24h, 0
	// to 30 days) is how long an authorized payment waits before the
	// completer's runs ask the provider whether its hold lapsed; the
	// provider's answer, not this, decides.
	AuthorizationCheckAfter time.Duration
	// ReceivedLookupAfter (RECEIVED_LOOKUP_AFTER, default 5m, 0 to 24h) is
	// how long a capture, void or refund the provider received waits for
	// its event before the completer's runs look it up, where the provider
	// can be asked; one no lookup settles stays PENDING, listed for the
	// reconciliation.
	ReceivedLookupAfter time.Duration
	// OrderConsumer configures the order-projection consumer, which runs
	// only when KafkaBrokers is set.
	OrderConsumer OrderConsumer
	// Saga configures the payment step of order sagas: its commands
	// consumer runs only when KafkaBrokers is set, on the order consumer's
	// KAFKA_CONSUMER_* settings but for its batch wait.
	Saga Saga

	// Tracing (the standard OTEL_* variables; tracing.go) is off unless an
	// OTLP endpoint is set.
	Tracing Tracing
}

// OrderConsumer is the order-projection consumer's configuration.
type OrderConsumer struct {
	// Topic (ORDER_EVENTS_TOPIC, default order.events) is consumed.
	Topic string
	// DLTTopic (ORDER_EVENTS_DLT_TOPIC, default order.events.DLT) receives
	// records that can never be applied. It must exist.
	DLTTopic string
	// Group (ORDER_CONSUMER_GROUP, default order-projection) is the
	// consumer group, and the consumer_name in processed_event.
	Group string
	// DefaultCurrency (DEFAULT_CURRENCY, default RUB) is used for events
	// that carry no currency.
	DefaultCurrency string
	// MaxClockSkew (ORDER_EVENTS_MAX_CLOCK_SKEW, default 5m, 1s to 24h) is
	// how far ahead of this consumer's clock an event's occurredAt may be;
	// a later one goes to the dead-letter topic, because the projection
	// keeps an order's newest event and one dated in the future would hide
	// every real event of the order until then.
	MaxClockSkew time.Duration
	// MaxWait (KAFKA_CONSUMER_MAX_WAIT, default 500ms) bounds a fetch's
	// wait for new records, and so how long Close and a rebalance wait.
	MaxWait time.Duration
	// HeartbeatInterval (KAFKA_CONSUMER_HEARTBEAT_INTERVAL, default 3s)
	// and SessionTimeout (KAFKA_CONSUMER_SESSION_TIMEOUT, default 45s) are
	// the group membership timers.
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	// BatchSize (KAFKA_CONSUMER_BATCH_SIZE, default 500) caps the records
	// applied in one transaction; BatchWait (KAFKA_CONSUMER_BATCH_WAIT,
	// default 10ms) is how long to wait for more once one has arrived.
	BatchSize int
	BatchWait time.Duration
	// RetryBackoff (KAFKA_CONSUMER_RETRY_BACKOFF, default 100ms) is the
	// first pause after a failed batch; it doubles up to MaxRetryBackoff
	// (KAFKA_CONSUMER_MAX_RETRY_BACKOFF, default 10s).
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxAttempts (KAFKA_CONSUMER_MAX_ATTEMPTS, default 5, 1 to 100) is how
	// often one event the database rejects for good is tried, alone,
	// before it goes to the dead-letter topic. Failures about the system
	// (database down) are retried without limit.
	MaxAttempts int
}

// Saga is the saga transport's configuration.
type Saga struct {
	// CommandsTopic (PAYMENT_COMMANDS_TOPIC, default payment.commands) is
	// consumed: ChargeOrder.v1 and CompensateCharge.v1.
	CommandsTopic string
	// CommandsDLTTopic (PAYMENT_COMMANDS_DLT_TOPIC, default
	// payment.commands.DLT) receives commands that cannot be read. It must
	// exist.
	CommandsDLTTopic string
	// RepliesTopic (PAYMENT_REPLIES_TOPIC, default payment.replies)
	// receives the steps' replies, through the outbox.
	RepliesTopic string
	// Group (PAYMENT_COMMANDS_GROUP, default payment-saga) is the commands'
	// consumer group, and its consumer_name in processed_event.
	Group string
	// ClientID (SAGA_CLIENT_ID, default saga) is the API client the
	// saga's payments belong to: give it a key in API_KEYS to read them
	// over HTTP.
	ClientID string
	// OrderWait (SAGA_ORDER_WAIT, default 30s, 0 to 1h) is how long a step
	// whose order the projection does not hold yet is tried again before
	// it fails order-not-found.
	OrderWait time.Duration
	// Workers (SAGA_WORKERS, default 16, 1 to 256) is how many sagas are
	// carried out at once, and how many fetched batches at most are in
	// flight.
	Workers int
	// BatchWait (SAGA_CONSUMER_BATCH_WAIT, default SagaBatchWait, 0 to
	// 10s) is how long the commands consumer waits for more commands once
	// one has arrived; 0 starts each command as it comes. It is the
	// commands' own, not KAFKA_CONSUMER_BATCH_WAIT: a batch of commands
	// is pipelined, so a step gains nothing from waiting for others to
	// fill its batch, and the wait adds to every step's time, while the
	// order events need theirs to fill a transaction of up to
	// KAFKA_CONSUMER_BATCH_SIZE events.
	BatchWait time.Duration
}

// SagaBatchWait is SAGA_CONSUMER_BATCH_WAIT's default.
const SagaBatchWait = time.Millisecond

// APIKey is one client's credential. Only the key's SHA-256 digest is kept,
// so the comparison in the auth middleware runs over equal-length values.
type APIKey struct {
	ClientID  string
	KeyDigest [sha256.Size]byte
}

// Load parses the environment through getenv (os.Getenv in main, a map in
// tests). All problems are reported together.
func Load(getenv func(string) string) (Config, error) {
	p := parser{getenv: getenv}
	cfg := Config{
		DatabaseURL:            p.str("DATABASE_URL", "", true),
		DatabaseMaxConns:       p.positiveInt("DATABASE_MAX_CONNS", 20),
		HTTPAddr:               p.addr("HTTP_ADDR", ":8080"),
		APIKeys:                p.apiKeys("API_KEYS"),
		MigrateOnStart:         p.boolean("MIGRATE_ON_START", false),
		IdempotencyLockTimeout: p.duration("IDEMPOTENCY_LOCK_TIMEOUT", 30*time.Second, time.Second, time.Hour),
		ProviderTimeout:        p.duration("PROVIDER_TIMEOUT", 10*time.Second, 100*time.Millisecond, 10*time.Minute),
		ProviderConnectTimeout: p.duration("PROVIDER_CONNECT_TIMEOUT", 0, 10*time.Millisecond, time.Minute),
		ProviderMaxRequestAge:  p.duration("PROVIDER_MAX_REQUEST_AGE", 0, 10*time.Millisecond, time.Hour),
		ShutdownTimeout:        p.duration("SHUTDOWN_TIMEOUT", 15*time.Second, time.Second, 10*time.Minute),
		LogLevel:               p.level("LOG_LEVEL", slog.LevelInfo),
		KafkaBrokers:           p.list("KAFKA_BROKERS"),
	}
	p.paymentProvider(&cfg)
	if v := p.str("DEBUG_ADDR", "", false); v != "" {
		cfg.DebugAddr = p.addr("DEBUG_ADDR", v)
	}
	cfg.Retention = p.retention()
	cfg.ReplayCache = p.replayCache()
	cfg.Reconciliation = p.reconciliation()
	cfg.OperatorClients = p.operatorClients(cfg.APIKeys)

	cfg.PaymentEventsTopic = p.topic("PAYMENT_EVENTS_TOPIC", "payment.events")
	cfg.OutboxBatchSize = p.positiveInt("OUTBOX_BATCH_SIZE", 100)
	if cfg.OutboxBatchSize > 10000 {
		p.fail("OUTBOX_BATCH_SIZE", "must be at most 10000, got %d", cfg.OutboxBatchSize)
	}
	cfg.OutboxPollInterval = p.duration("OUTBOX_POLL_INTERVAL", 5*time.Second, 100*time.Millisecond, 5*time.Minute)
	// With the defaults the whole shutdown fits an orchestrator's usual
	// 30s grace: max(jobs 5s, consumer 5s, HTTP 15s plus the charges'
	// 11s abort grace) plus the relay's 3s.
	cfg.ShutdownJobsTimeout = p.duration("SHUTDOWN_JOBS_TIMEOUT", 5*time.Second, 100*time.Millisecond, 10*time.Minute)
	cfg.ShutdownConsumerTimeout = p.duration("SHUTDOWN_CONSUMER_TIMEOUT", 5*time.Second, 100*time.Millisecond, 10*time.Minute)
	cfg.ShutdownRelayTimeout = p.duration("SHUTDOWN_RELAY_TIMEOUT", 3*time.Second, 100*time.Millisecond, 10*time.Minute)
	cfg.OrderConsumer = p.orderConsumer()
	cfg.Saga = p.saga(cfg.OrderConsumer)
	cfg.Webhooks = p.webhooks()
	cfg.AuthorizationCheckAfter = p.duration("AUTHORIZATION_CHECK_AFTER", 24*time.Hour, 0, 30*24*time.Hour)
	cfg.ReceivedLookupAfter = p.duration("RECEIVED_LOOKUP_AFTER", 5*time.Minute, 0, 24*time.Hour)
	cfg.Tracing = p.tracing()
	// A provider call must end while its claim still holds the key: a call
	// that outlives the lock lets a retry take the key over and call the
	// provider with the same provider key while the first call is running.
	// Half the lock leaves the rest for the two database phases around it.
	if cfg.ProviderTimeout > cfg.IdempotencyLockTimeout/2 {
		p.fail("PROVIDER_TIMEOUT", "must be at most half of IDEMPOTENCY_LOCK_TIMEOUT (%s), so a call ends before its lock does; got %s", cfg.IdempotencyLockTimeout, cfg.ProviderTimeout)
	}
	if cfg.ProviderConnectTimeout == 0 { // unset: 2s, or the whole call if that is shorter
		cfg.ProviderConnectTimeout = min(2*time.Second, cfg.ProviderTimeout)
	}
	if cfg.ProviderConnectTimeout > cfg.ProviderTimeout {
		p.fail("PROVIDER_CONNECT_TIMEOUT", "must be at most PROVIDER_TIMEOUT (%s), got %s", cfg.ProviderTimeout, cfg.ProviderConnectTimeout)
	}
	most := cfg.IdempotencyLockTimeout - cfg.ProviderTimeout
	if cfg.ProviderMaxRequestAge == 0 { // unset: follows the lock and the call's bound
		cfg.ProviderMaxRequestAge = max(min(10*time.Second, most), 10*time.Millisecond)
	}
	if cfg.ProviderMaxRequestAge > most {
		p.fail("PROVIDER_MAX_REQUEST_AGE", "must be at most IDEMPOTENCY_LOCK_TIMEOUT minus PROVIDER_TIMEOUT (%s), so a resumed attempt can wait it out under its lock; got %s", most, cfg.ProviderMaxRequestAge)
	}
	return cfg, errors.Join(p.errs...)
}

// LoadDatabaseURL reads only DATABASE_URL, for commands such as `migrate`
// that need nothing else.
func LoadDatabaseURL(getenv func(string) string) (string, error) {
	p := parser{getenv: getenv}
	url := p.str("DATABASE_URL", "", true)
	return url, errors.Join(p.errs...)
}

type parser struct {
	getenv func(string) string
	errs   []error
}

func (p *parser) fail(name, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
}

func (p *parser) str(name, def string, required bool) string {
	v := strings.TrimSpace(p.getenv(name))
	if v == "" {
		if required {
			p.fail(name, "is required")
		}
		return def
	}
	return v
}

func (p *parser) positiveInt(name string, def int) int {
	v := p.str(name, "", false)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		p.fail(name, "must be a positive integer, got %q", v)
		return def
	}
	return n
}

func (p *parser) nonNegativeInt(name string, def int) int {
	v := p.str(name, "", false)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		p.fail(name, "must be an integer, 0 or more, got %q", v)
		return def
	}
	return n
}

func (p *parser) boolean(name string, def bool) bool {
	v := p.str(name, "", false)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, "must be true or false, got %q", v)
		return def
	}
	return b
}

func (p *parser) duration(name string, def, lo, hi time.Duration) time.Duration {
	v := p.str(name, "", false)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.fail(name, "must be a duration such as 30s or 250ms, got %q", v)
		return def
	}
	if d < lo || d > hi {
		p.fail(name, "must be between %s and %s, got %s", lo, hi, d)
		return def
	}
	return d
}

func (p *parser) addr(name, def string) string {
	v := p.str(name, def, false)
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.fail(name, "must be host:port or :port, got %q", v)
		return def
	}
	return v
}

// httpURL reads a required http:// or https:// base URL.
func (p *parser) httpURL(name string) string {
	v := p.str(name, "", true)
	if v == "" {
		return ""
	}
	return p.checkHTTPURL(name, v, "http://127.0.0.1:8081")
}

// checkHTTPURL returns v if it is an http:// or https:// URL with a host;
// otherwise it records the failure, naming example, and returns "".
func (p *parser) checkHTTPURL(name, v, example string) string {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.fail(name, "must be an http:// or https:// URL such as %s, got %q", example, v)
		return ""
	}
	return v
}

func (p *parser) level(name string, def slog.Level) slog.Level {
	v := p.str(name, "", false)
	if v == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		p.fail(name, "must be debug, info, warn or error, got %q", v)
		return def
	}
	return l
}

func (p *parser) list(name string) []string {
	var out []string
	for item := range strings.SplitSeq(p.str(name, "", false), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func (p *parser) apiKeys(name string) []APIKey {
	raw := p.str(name, "", true)
	if raw == "" {
		return nil
	}
	var keys []APIKey
	seen := map[string]bool{}
	owner := map[[sha256.Size]byte]string{} // key digest -> first client with it
	for i, pair := range strings.Split(raw, ",") {
		client, key, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || client == "" || key == "" {
			p.fail(name, "entry %d must be client:key", i+1)
			continue
		}
		if seen[client] {
			p.fail(name, "client %q appears twice", client)
			continue
		}
		seen[client] = true
		digest := sha256.Sum256([]byte(key))
		// One key for two clients makes them one client to the auth
		// middleware: every request is attributed to one of them, and each
		// could replay and read the other's payments. The message names
		// the clients, never the key.
		if first, dup := owner[digest]; dup {
			p.fail(name, "clients %q and %q have the same key; give each client its own", first, client)
			continue
		}
		owner[digest] = client
		keys = append(keys, APIKey{ClientID: client, KeyDigest: digest})
	}
	return keys
}

// saga reads the saga transport's variables.
func (p *parser) saga(order OrderConsumer) Saga {
	s := Saga{
		CommandsTopic:    p.topic("PAYMENT_COMMANDS_TOPIC", "payment.commands"),
		CommandsDLTTopic: p.topic("PAYMENT_COMMANDS_DLT_TOPIC", "payment.commands.DLT"),
		RepliesTopic:     p.topic("PAYMENT_REPLIES_TOPIC", "payment.replies"),
		Group:            p.str("PAYMENT_COMMANDS_GROUP", "payment-saga", false),
		ClientID:         p.str("SAGA_CLIENT_ID", "saga", false),
		OrderWait:        p.duration("SAGA_ORDER_WAIT", 30*time.Second, 0, time.Hour),
		Workers:          p.positiveInt("SAGA_WORKERS", 16),
		BatchWait:        p.duration("SAGA_CONSUMER_BATCH_WAIT", SagaBatchWait, 0, 10*time.Second),
	}
	if s.Workers > 256 {
		p.fail("SAGA_WORKERS", "must be at most 256, got %d", s.Workers)
	}
	if s.CommandsTopic == s.CommandsDLTTopic {
		p.fail("PAYMENT_COMMANDS_DLT_TOPIC", "must differ from PAYMENT_COMMANDS_TOPIC (%s)", s.CommandsTopic)
	}
	if s.Group == order.Group {
		p.fail("PAYMENT_COMMANDS_GROUP", "must differ from ORDER_CONSUMER_GROUP (%s): each consumer records its own events", order.Group)
	}
	for _, t := range []string{order.Topic, order.DLTTopic} {
		if s.CommandsTopic == t || s.RepliesTopic == t {
			p.fail("PAYMENT_COMMANDS_TOPIC", "the saga's topics must differ from the order events' (%s)", t)
		}
	}
	return s
}

// orderConsumer reads the order-projection consumer's variables.
func (p *parser) orderConsumer() OrderConsumer {
	c := OrderConsumer{
		Topic:             p.topic("ORDER_EVENTS_TOPIC", "order.events"),
		DLTTopic:          p.topic("ORDER_EVENTS_DLT_TOPIC", "order.events.DLT"),
		Group:             p.str("ORDER_CONSUMER_GROUP", "order-projection", false),
		DefaultCurrency:   p.currency("DEFAULT_CURRENCY", "RUB"),
		MaxClockSkew:      p.duration("ORDER_EVENTS_MAX_CLOCK_SKEW", 5*time.Minute, time.Second, 24*time.Hour),
		MaxWait:           p.duration("KAFKA_CONSUMER_MAX_WAIT", 500*time.Millisecond, 10*time.Millisecond, 30*time.Second),
		HeartbeatInterval: p.duration("KAFKA_CONSUMER_HEARTBEAT_INTERVAL", 3*time.Second, 10*time.Millisecond, time.Minute),
		SessionTimeout:    p.duration("KAFKA_CONSUMER_SESSION_TIMEOUT", 45*time.Second, 100*time.Millisecond, 30*time.Minute),
		BatchSize:         p.positiveInt("KAFKA_CONSUMER_BATCH_SIZE", 500),
		BatchWait:         p.duration("KAFKA_CONSUMER_BATCH_WAIT", 10*time.Millisecond, 0, 10*time.Second),
		RetryBackoff:      p.duration("KAFKA_CONSUMER_RETRY_BACKOFF", 100*time.Millisecond, time.Millisecond, time.Minute),
		MaxRetryBackoff:   p.duration("KAFKA_CONSUMER_MAX_RETRY_BACKOFF", 10*time.Second, time.Millisecond, 10*time.Minute),
		MaxAttempts:       p.positiveInt("KAFKA_CONSUMER_MAX_ATTEMPTS", 5),
	}
	if c.MaxAttempts > 100 {
		p.fail("KAFKA_CONSUMER_MAX_ATTEMPTS", "must be at most 100, got %d", c.MaxAttempts)
	}
	if c.Topic == c.DLTTopic {
		p.fail("ORDER_EVENTS_DLT_TOPIC", "must differ from ORDER_EVENTS_TOPIC (%s)", c.Topic)
	}
	if c.BatchSize > 10000 {
		p.fail("KAFKA_CONSUMER_BATCH_SIZE", "must be at most 10000, got %d", c.BatchSize)
	}
	// Kafka's own rule: heartbeats must come well within the session
	// timeout, or a live member is declared dead between two of them.
	if c.HeartbeatInterval*3 > c.SessionTimeout {
		p.fail("KAFKA_CONSUMER_HEARTBEAT_INTERVAL", "must be at most a third of KAFKA_CONSUMER_SESSION_TIMEOUT (%s), got %s", c.SessionTimeout, c.HeartbeatInterval)
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		p.fail("KAFKA_CONSUMER_MAX_RETRY_BACKOFF", "must be at least KAFKA_CONSUMER_RETRY_BACKOFF (%s), got %s", c.RetryBackoff, c.MaxRetryBackoff)
	}
	return c
}

// topic accepts a legal Kafka topic name: 1 to 249 of [a-zA-Z0-9._-].
func (p *parser) topic(name, def string) string {
	v := p.str(name, def, false)
	ok := len(v) <= 249 && v != "." && v != ".."
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			ok = false
		}
	}
	if !ok {
		p.fail(name, "must be a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -), got %q", v)
		return def
	}
	return v
}

// currency accepts a 3-letter upper-case ISO 4217 code.
func (p *parser) currency(name, def string) string {
	v := p.str(name, def, false)
	ok := len(v) == 3
	for _, r := range v {
		if r < 'A' || r > 'Z' {
			ok = false
		}
	}
	if !ok {
		p.fail(name, "must be a 3-letter upper-case ISO 4217 code such as RUB, got %q", v)
		return def
	}
	return v
}
