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
	"github.com/example/payment-service/internal/consumer"
	"github.com/example/payment-service/internal/domain"
	httpapi "github.com/example/payment-service/internal/http"
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

	// orderConsumer is nil when KAFKA_BROKERS is not set.
	orderConsumer *consumer.Consumer
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

	tx := repository.NewTransactor(db)

	// The order-projection consumer (issue 3); readiness includes its state.
	orderConsumer, err := newOrderConsumer(cfg, tx, registry, logger)
	if err != nil {
		closeDB()
		return nil, err
	}

	handler := httpapi.NewHandler(httpapi.Deps{
		Logger:        logger,
		APIKeys:       cfg.APIKeys,
		Providers:     providerNames,
		ChargePayment: app.NewChargePayment(tx, providers, httpapi.ResponseEncoder{}, cfg.IdempotencyLockTimeout, logger),
		GetPayment:    app.NewGetPayment(tx),
		GetOrder:      app.NewGetOrder(tx),
		Ready: func(ctx context.Context) error {
			return errors.Join(repository.Ping(ctx, db), orderConsumerHealth(orderConsumer))
		},
		Registry: registry,
	})

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		closeDB()
		return nil, fmt.Errorf("listen on HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
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
		orderConsumer: orderConsumer,
	}, nil
}

// Addr is the address the HTTP server listens on (useful with port 0).
func (s *Service) Addr() string { return s.listener.Addr().String() }

// Run serves until ctx ends, then shuts down gracefully, in reverse start
// order: the order consumer stops (finishing or abandoning its batch
// uncommitted), in-flight requests get cfg.ShutdownTimeout to finish, and
// the database closes last. It returns nil after a clean shutdown.
func (s *Service) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)

	// The consumer starts after the HTTP server and stops before it. Its
	// context is its own, cancelled by the shutdown below, so that the
	// stop order does not depend on which goroutine sees ctx end first.
	consumerCtx, stopConsumer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConsumer()
	consumerDone := make(chan struct{})

	g.Go(func() error {
		s.logger.Info("serving HTTP", "addr", s.Addr())
		if err := s.server.Serve(s.listener); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer close(consumerDone)
		if err := runOrderConsumer(consumerCtx, s.orderConsumer); err != nil {
			return fmt.Errorf("order consumer: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		s.logger.Info("shutting down", "timeout", s.cfg.ShutdownTimeout)
		stopConsumer()
		select {
		case <-consumerDone:
		case <-time.After(s.cfg.ShutdownTimeout):
			// Still closing (a broker that does not answer the leave
			// request): stop HTTP anyway; Run waits for it before closing
			// the database.
			s.logger.Warn("order consumer still stopping; shutting HTTP down meanwhile")
		}
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		defer cancel()
		if err := s.server.Shutdown(shutdownCtx); err != nil {
			return fmt.Errorf("http shutdown: %w", err)
		}
		return nil
	})
	err := g.Wait()
	if sqlDB, dbErr := s.db.DB(); dbErr == nil {
		err = errors.Join(err, sqlDB.Close())
	}
	s.logger.Info("stopped")
	return err
}
