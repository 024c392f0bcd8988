// Package service wires the payment service together: it builds the
// adapters from Config, the use cases from the adapters, and runs the
// components until the context ends, then stops them in reverse order.
// cmd/payment-service and cmd/payment-dev both run it, and the end-to-end
// tests run it on port 0.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/consumer"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/jobs"
	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/provider/stripe"
	"github.com/example/payment-service/internal/replaycache"
	"github.com/example/payment-service/internal/repository"
	"github.com/example/payment-service/internal/telemetry"
)

// Service is a configured, listening payment service.
//
// Its components start in this order:
//
//	outbox relay   publishes payment events (only with KAFKA_BROKERS)
//	HTTP server    the API
//	order consumer keeps the order projection (only with KAFKA_BROKERS)
//	job scheduler  retention and the completer (on the elected replica)
//
// and stop in two stages (shutdown.go): first the writers side by side,
// each within its own bound (the jobs, the consumer, and the HTTP drain
// with the charges its requests started), then the relay, within a bound
// of its own, after publishing what the writers committed. A writer stuck
// until its bound cannot spend the relay's time. The database pool closes
// after all of them.
type Service struct {
	cfg      config.Config
	logger   *slog.Logger
	db       *gorm.DB
	listener net.Listener
	server   *http.Server
	debug    *debugServer // nil unless DEBUG_ADDR is set

	relay         *outbox.Relay          // nil without KAFKA_BROKERS
	outboxWaker   *outbox.Waker          // runs whether or not this replica relays
	orderConsumer *consumer.Consumer     // nil without KAFKA_BROKERS
	sagaConsumer  *consumer.SagaConsumer // nil without KAFKA_BROKERS
	jobs          *scheduledJobs
	commands      *app.Core          // its commands are drained before the pool closes (shutdown.go)
	tracing       *telemetry.Tracing // flushed after everything else stopped
}

// Option configures New.
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
}

// WithTracerProvider turns tracing on with a provider the caller owns and
// shuts down, whatever the OTEL_* configuration says (the tracing tests
// use the SDK with an in-memory exporter).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// newTracing builds tracing from cfg.Tracing, unless an option brings a
// provider.
func newTracing(ctx context.Context, cfg config.Config, o options, logger *slog.Logger) (*telemetry.Tracing, error) {
	if o.tracerProvider != nil {
		return telemetry.With(o.tracerProvider), nil
	}
	return telemetry.New(ctx, telemetry.Config{Endpoint: cfg.Tracing.Endpoint, ServiceName: cfg.Tracing.ServiceName}, logger)
}

// databaseTracing is the statement tracer of the pool, only when tracing is
// on: otelpgx does work per statement even with a no-op provider.
func databaseTracing(tracing *telemetry.Tracing) []repository.OpenOption {
	if !tracing.Enabled() {
		return nil
	}
	return []repository.OpenOption{repository.WithQueryTracer(otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tracing.TracerProvider()),
		otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
	))}
}

// useCases are the application layer over one database: what both `serve`
// and `cleanup` run.
type useCases struct {
	tx *repository.Transactor
	// provider is the one the service charges through (PAYMENT_PROVIDER),
	// and stripeEvents the reader of Stripe's deliveries, when it is
	// Stripe and has a webhook secret.
	provider      domain.ProviderName
	stripeEvents  httpapi.ProviderEventReader
	providerNames []domain.ProviderName
	core          *app.Core // what every money-moving command shares
	chargePayment *app.ChargePayment
	refundPayment *app.RefundPayment // on the charge's core: one drain for both
	sagaSteps     *app.SagaSteps     // the two, reached by the saga's commands
	// capturePayment and voidPayment move authorized payments on.
	capturePayment, voidPayment *app.PaymentTransition
	// outboxWaker wakes the relays after commits that wrote events; only
	// serve runs it (a cleanup's events wait for the relays' poll).
	outboxWaker *outbox.Waker
	// ledger reads the provider's balance transactions and payouts, for
	// reconciliation; nil for a provider whose adapter cannot.
	ledger app.ProviderLedger
}

// providerClient is a provider's adapter: every port, one client.
type providerClient interface {
	app.ChargeProvider
	app.AuthorizationProvider
	app.CaptureProvider
	app.VoidProvider
	app.RefundProvider
}

// newProvider builds the adapter of the provider PAYMENT_PROVIDER names,
// and, for Stripe with a webhook secret, the reader of its deliveries.
func newProvider(cfg config.Config) (domain.ProviderName, providerClient, httpapi.ProviderEventReader, error) {
	if cfg.PaymentProvider == config.ProviderStripe {
		c, err := stripe.New(stripe.Config{
			SecretKey:      string(cfg.Stripe.SecretKey.Bytes()),
			APIBase:        cfg.Stripe.APIBase,
			ConnectTimeout: cfg.ProviderConnectTimeout,
			Timeout:        cfg.ProviderTimeout,
		})
		if err != nil {
			return "", nil, nil, err
		}
		var events httpapi.ProviderEventReader
		if secret := cfg.Stripe.WebhookSecret.Bytes(); len(secret) > 0 {
			events = stripe.NewEventReader(string(secret))
		}
		return stripe.Name, c, events, nil
	}
	modifications := app.AnswersAtOnce
	if cfg.SandboxModifications == config.ModificationsReceived {
		modifications = app.AnswersReceived
	}
	c, err := sandbox.New(sandbox.Config{
		BaseURL:        cfg.SandboxProviderURL,
		ConnectTimeout: cfg.ProviderConnectTimeout,
		Timeout:        cfg.ProviderTimeout,
		MaxRequestAge:  cfg.ProviderMaxRequestAge,
		Modifications:  modifications,
	})
	return sandbox.Name, c, nil, err
}

// newUseCases builds the provider (each call counted in registry) and the
// use cases that need it.
func newUseCases(cfg config.Config, db *gorm.DB, registry prometheus.Registerer, tracing *telemetry.Tracing, logger *slog.Logger) (useCases, error) {
	calls := provider.CallsMetric(registry)
	duration := provider.DurationMetric(registry)
	name, client, stripeEvents, err := newProvider(cfg)
	if err != nil {
		return useCases{}, err
	}
	observe := []provider.Option{provider.WithDuration(duration), provider.WithTracer(tracing.Tracer("github.com/example/payment-service/internal/provider"))}
	providers := map[domain.ProviderName]app.ChargeProvider{
		// Charges and authorizations: both providers take two-step payments.
		name: provider.InstrumentTwoStep(name, client, calls, observe...),
	}
	names := make([]domain.ProviderName, 0, len(providers))
	for name := range providers {
		names = append(names, name)
	}
	// One gate for every use of the pool: requests wait for a connection in
	// the order they came, not in database/sql's random order.
	gate := repository.NewGate(cfg.DatabaseMaxConns)
	waker := outbox.NewWaker(repository.OutboxNotifier(db, gate), logger)
	outboxCfg := repository.OutboxConfig{PaymentEventsTopic: cfg.PaymentEventsTopic, RepliesTopic: cfg.Saga.RepliesTopic, Waker: waker}
	tx := repository.NewTransactor(db, repository.WithOutbox(outboxCfg), repository.WithGate(gate))
	coreOpts := []app.CoreOption{
		app.WithTracer(tracing.Tracer("github.com/example/payment-service/internal/app")),
		// A live attempt answers within its call's bound, after which the
		// record follows at once.
		app.WithAnswerBound(cfg.ProviderTimeout + time.Second),
		// A command that comes through a saga's operation is answered by
		// a reply on its topic; any other by its HTTP response.
		app.WithSagaReplies(consumer.SagaReplies{}),
	}
	if rc := cfg.ReplayCache; rc.Entries > 0 {
		coreOpts = append(coreOpts, app.WithReplayCache(replaycache.New(rc.Entries, registry), app.ReplayCachePolicy{
			// Not this replica's IDEMPOTENCY_TTL: the least any replica's
			// purge may run with, so a fleet whose TTLs differ (a deploy
			// that changes it) never purges a record a replica still keeps.
			Retention:   config.MinIdempotencyTTL,
			ClockMargin: rc.ClockMargin,
			MaxAge:      rc.MaxAge,
		}))
	}
	core := app.NewCore(tx, httpapi.ResponseEncoder{}, cfg.IdempotencyLockTimeout, logger, coreOpts...)
	charges := app.NewChargePayment(core, providers)
	// The one provider refunds too; its refund calls are counted and traced
	// with its charges.
	refunds := app.NewRefundPayment(core,
		provider.InstrumentRefunds(name, client, calls, observe...))
	// A void releases a hold asked over HTTP, or by the compensation of a
	// saga step that authorized.
	voids := app.NewVoidPayment(core, provider.InstrumentVoids(name, client, calls, observe...))
	uc := useCases{
		tx:            tx,
		provider:      name,
		stripeEvents:  stripeEvents,
		providerNames: names,
		core:          core,
		chargePayment: charges,
		refundPayment: refunds,
		sagaSteps: app.NewSagaSteps(charges, refunds, voids, consumer.SagaReplies{}, domain.ClientID(cfg.Saga.ClientID),
			cfg.Saga.OrderWait, cfg.Saga.Group, logger),
		outboxWaker: waker,
	}
	uc.capturePayment = app.NewCapturePayment(core, provider.InstrumentCaptures(name, client, calls, observe...))
	uc.voidPayment = voids
	uc.ledger, _ = client.(app.ProviderLedger)
	return uc, nil
}

// transitions are the captures and voids, when the provider takes them.
func (uc useCases) transitions() []*app.PaymentTransition {
	if uc.capturePayment == nil {
		return nil
	}
	return []*app.PaymentTransition{uc.capturePayment, uc.voidPayment}
}

// New builds the service and binds its HTTP listener, but runs nothing
// until Run. With cfg.MigrateOnStart it applies pending migrations first.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger, opts ...Option) (_ *Service, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tracing, err := newTracing(ctx, cfg, o, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tracing.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	logger = slog.New(tracing.LogHandler(logger.Handler()))

	if cfg.MigrateOnStart {
		logger.InfoContext(ctx, "applying migrations")
		if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	db, err := repository.Open(cfg.DatabaseURL, repository.PoolConfig{MaxOpenConns: cfg.DatabaseMaxConns, ConnMaxLifetime: 30 * time.Minute}, logger,
		databaseTracing(tracing)...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			closeDB(db)
		}
	}()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reconciliation := repository.NewReconciliation(db)
	// Every replica reports the items from the database, whichever runs
	// the job.
	registry.MustRegister(jobs.NewReconciliationMetrics(reconciliation, logger))
	// The pool: go_sql_open_connections, go_sql_in_use_connections,
	// go_sql_wait_count_total ... {db_name="payments"}.
	if sqlDB, err := db.DB(); err == nil {
		registry.MustRegister(collectors.NewDBStatsCollector(sqlDB, "payments"))
	}
	uc, err := newUseCases(cfg, db, registry, tracing, logger)
	if err != nil {
		return nil, err
	}

	orderConsumer, err := newOrderConsumer(cfg, uc.tx, registry, tracing, logger)
	if err != nil {
		return nil, err
	}
	sagaConsumer, err := newSagaConsumer(cfg, uc.sagaSteps, registry, tracing, logger)
	if err != nil {
		return nil, err
	}
	relay, err := newOutboxRelay(cfg, logger, registry, tracing)
	if err != nil {
		return nil, err
	}
	scheduled, err := newScheduledJobs(cfg, db, newJobs(cfg, db, uc, registry, logger))
	if err != nil {
		return nil, err
	}

	handler := httpapi.NewHandler(httpapi.Deps{
		Logger:         logger,
		APIKeys:        cfg.APIKeys,
		Providers:      uc.providerNames,
		ChargePayment:  uc.chargePayment,
		GetPayment:     app.NewGetPayment(uc.tx),
		RefundPayment:  uc.refundPayment,
		ListRefunds:    app.NewListRefunds(uc.tx),
		CapturePayment: uc.capturePayment,
		VoidPayment:    uc.voidPayment,
		GetOrder:       app.NewGetOrder(uc.tx),
		// The provider's events are its answers too, recorded by the
		// commands' own phase 3 (decision 0021), each once under its
		// provider's consumer name (webhook:sandbox, webhook:stripe).
		ApplyProviderEvent: app.NewApplyProviderEvent(uc.chargePayment, uc.refundPayment, "webhook:"+string(uc.provider), logger, uc.transitions()...),
		Webhooks:           cfg.Webhooks,
		StripeEvents:       uc.stripeEvents,
		// Readiness is the database only; the background components are
		// on /health and in metrics (health.go).
		Ready:           func(ctx context.Context) error { return repository.Ping(ctx, db) },
		Components:      backgroundComponents(registry, orderConsumer, sagaConsumer, relay),
		Registry:        registry,
		Tracing:         tracing,
		Reconciliation:  reconciliation,
		OperatorClients: cfg.OperatorClients,
	})
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	debug, err := newDebugServer(cfg.DebugAddr)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &Service{
		cfg:      cfg,
		logger:   logger,
		db:       db,
		listener: ln,
		server: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      cfg.IdempotencyLockTimeout + 10*time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		debug:         debug,
		relay:         relay,
		outboxWaker:   uc.outboxWaker,
		orderConsumer: orderConsumer,
		sagaConsumer:  sagaConsumer,
		jobs:          scheduled,
		commands:      uc.core,
		tracing:       tracing,
	}, nil
}

// Addr is the address the HTTP server listens on (useful with port 0).
func (s *Service) Addr() string { return s.listener.Addr().String() }

// Run runs every component until ctx ends or one of them fails, then stops
// them (stopWriters, then stopRelay), each stage within its own bound, and
// closes the database once no charge runs: charges still running at the
// HTTP drain's bound are aborted and left to the takeover (drainCharges).
// It returns nil after a clean shutdown.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)

	var relay, orderConsumer, sagaConsumer *background
	if s.relay != nil {
		relay = s.goBackground(g, ctx, "outbox relay", s.relay.Run)
	}
	// Another replica's relay may lead: every replica wakes it.
	waker := s.goBackground(g, ctx, "outbox waker", s.outboxWaker.Run)
	g.Go(func() error {
		s.logger.Info("serving HTTP", "addr", s.Addr())
		if err := s.server.Serve(s.listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	if s.orderConsumer != nil {
		orderConsumer = s.goBackground(g, ctx, "order consumer", s.orderConsumer.Run)
	}
	if s.sagaConsumer != nil {
		sagaConsumer = s.goBackground(g, ctx, "saga commands consumer", s.sagaConsumer.Run)
	}
	s.debug.run(g, s.logger)
	s.jobs.scheduler.Start()

	poolFree := true
	g.Go(func() error {
		<-gctx.Done()
		s.logger.Info("shutting down", "http_timeout", s.cfg.ShutdownTimeout, "jobs_timeout", s.cfg.ShutdownJobsTimeout,
			"consumer_timeout", s.cfg.ShutdownConsumerTimeout, "relay_timeout", s.cfg.ShutdownRelayTimeout)
		stopCtx := context.WithoutCancel(ctx)
		var err error
		poolFree, err = s.stopWriters(stopCtx, orderConsumer, sagaConsumer)
		// The writers have stopped; the relay publishes what they
		// committed without a wake (stopRelay).
		waker.stop(stopCtx)
		s.stopRelay(stopCtx, relay)
		s.debug.close()
		return err
	})
	err := g.Wait()
	if poolFree {
		closeDB(s.db)
	}
	// Last: the spans of the drain and the shutdown are exported too.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if flushErr := s.tracing.Shutdown(flushCtx); flushErr != nil {
		s.logger.Warn("exporting the last spans failed", "err", flushErr)
	}
	s.logger.Info("stopped")
	return err
}

// background is a long-running component with a context of its own, so the
// shutdown sequence in Run, not the order in which goroutines notice ctx
// end, decides when each one stops.
type background struct {
	name   string
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Service) goBackground(g *errgroup.Group, ctx context.Context, name string, run func(context.Context) error) *background {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &background{name: name, logger: s.logger, cancel: cancel, done: make(chan struct{})}
	g.Go(func() error {
		defer close(b.done)
		if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
	return b
}

// stop cancels the component and waits for it until ctx ends; Run's
// errgroup still waits for it before the database closes. A nil component
// (not configured) is already stopped.
func (b *background) stop(ctx context.Context) {
	if b == nil {
		return
	}
	b.cancel()
	select {
	case <-b.done:
	case <-ctx.Done():
		b.logger.Warn("still stopping after the shutdown timeout", "component", b.name)
	}
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}
