// Package service wires the payment service together: it builds the
// adapters from Config, the use cases from the adapters, and runs the
// servers until the context ends, then shuts them down in reverse order.
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
	"github.com/example/payment-service/internal/kafka/idempotent"
	"github.com/example/payment-service/internal/outbox"
	"github.com/example/payment-service/internal/provider"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/repository"
)

// Service is a configured, listening payment service.
type Service struct {
	cfg      config.Config
	logger   *slog.Logger
	db       *gorm.DB
	listener net.Listener
	server   *http.Server
	jobs     *scheduledJobs // retention and completer jobs (jobs.go)
	relay    *outbox.Relay  // nil without KAFKA_BROKERS
}

// New builds the service and binds its HTTP listener, but serves nothing
// until Run. With cfg.MigrateOnStart it applies pending migrations first.
func New(ctx context.Context, cfg config.Config, logger *slog.Logger) (*Service, error) {
	if cfg.MigrateOnStart {
		logger.InfoContext(ctx, "applying migrations")
		if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
			return nil, err
		}
	}
	db, err := repository.Open(cfg.DatabaseURL, repository.PoolConfig{MaxOpenConns: cfg.DatabaseMaxConns, ConnMaxLifetime: 30 * time.Minute}, logger)
	if err != nil {
		return nil, err
	}
	closeDB := func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	providerCalls := provider.CallsMetric(registry)
	providers := map[domain.ProviderName]app.PaymentProvider{
		sandbox.Name: provider.Instrument(sandbox.Name, sandbox.New(cfg.SandboxProviderLatency), providerCalls),
	}
	providerNames := make([]domain.ProviderName, 0, len(providers))
	for name := range providers {
		providerNames = append(providerNames, name)
	}

	tx := repository.NewTransactor(db, repository.WithOutbox(repository.OutboxConfig{PaymentEventsTopic: cfg.PaymentEventsTopic}))
	chargePayment := app.NewChargePayment(tx, providers, httpapi.ResponseEncoder{}, cfg.IdempotencyLockTimeout, logger)
	handler := httpapi.NewHandler(httpapi.Deps{
		Logger:        logger,
		APIKeys:       cfg.APIKeys,
		Providers:     providerNames,
		ChargePayment: chargePayment,
		GetPayment:    app.NewGetPayment(tx),
		Ready:         func(ctx context.Context) error { return repository.Ping(ctx, db) },
		Registry:      registry,
	})

	// Retention and completer jobs (issue 5, R-DIST-IDEM-5).
	scheduled, err := newScheduledJobs(cfg, db, newJobs(cfg, db, tx, chargePayment, registry, logger))
	if err != nil {
		closeDB()
		return nil, err
	}

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		_ = scheduled.scheduler.Shutdown(ctx)
		closeDB()
		return nil, fmt.Errorf("listen on HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	relay, err := newOutboxRelay(cfg, logger, registry)
	if err != nil {
		closeDB()
		_ = ln.Close()
		return nil, err
	}
	return &Service{
		jobs:     scheduled,
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
		relay: relay,
	}, nil
}

// Addr is the address the HTTP server listens on (useful with port 0).
func (s *Service) Addr() string { return s.listener.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully: in-flight requests
// get cfg.ShutdownTimeout to finish, and the database closes last. It
// returns nil after a clean shutdown.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)

	// The outbox relay starts before HTTP and stops after it, so the events
	// of requests that finish during the drain are still published.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	if s.relay != nil {
		g.Go(func() error { return s.relay.Run(relayCtx) })
	}

	g.Go(func() error {
		s.logger.Info("serving HTTP", "addr", s.Addr())
		if err := s.server.Serve(s.listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	// The jobs start after the HTTP server and stop before it.
	s.jobs.scheduler.Start()
	g.Go(func() error {
		<-gctx.Done()
		s.logger.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		defer cancel()
		jobsErr := s.jobs.stop(shutdownCtx)
		err := s.server.Shutdown(shutdownCtx)
		stopRelay()
		if err != nil {
			return errors.Join(jobsErr, fmt.Errorf("http shutdown: %w", err))
		}
		return jobsErr
	})
	err := g.Wait()
	if sqlDB, dbErr := s.db.DB(); dbErr == nil {
		err = errors.Join(err, sqlDB.Close())
	}
	s.logger.Info("stopped")
	return err
}

// newOutboxRelay builds the outbox relay when Kafka is configured. Every
// replica runs one; a PostgreSQL advisory lock makes one of them the leader
// that publishes (see internal/outbox).
func newOutboxRelay(cfg config.Config, logger *slog.Logger, reg prometheus.Registerer) (*outbox.Relay, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, nil
	}
	return outbox.New(outbox.Config{
		Store: repository.NewOutboxRelayStore(cfg.DatabaseURL, cfg.PaymentEventsTopic),
		NewPublisher: func() (outbox.Publisher, error) {
			return idempotent.New(idempotent.Config{
				Brokers:  cfg.KafkaBrokers,
				Topic:    cfg.PaymentEventsTopic,
				ClientID: "payment-service-outbox",
			})
		},
		BatchSize:    cfg.OutboxBatchSize,
		PollInterval: cfg.OutboxPollInterval,
		Metrics:      outbox.NewMetrics(reg, cfg.PaymentEventsTopic),
		Logger:       logger,
	})
}
