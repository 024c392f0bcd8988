// Command sandbox-provider runs the sandbox payment provider as its own HTTP
// service (internal/sandboxprovider): what payment-service charges through
// in development, in docker compose and in the tests that run processes.
//
//	sandbox-provider [serve]     serve on SANDBOX_ADDR (default :8081)
//	sandbox-provider healthcheck exit 0 if the local server answers /healthz
//
// The other variables (SANDBOX_LATENCY, SANDBOX_SLOW_DELAY,
// SANDBOX_FAULT_RATES, SANDBOX_FAULT_SEED, SANDBOX_AUTHORIZATION_TTL,
// SANDBOX_MODIFICATIONS, SANDBOX_MODIFICATION_DELAY,
// SANDBOX_MODIFICATION_FAILURE_RATE, and
// the webhooks' SANDBOX_WEBHOOK_URL, SANDBOX_WEBHOOK_SECRET,
// SANDBOX_WEBHOOK_RETRY_FOR, SANDBOX_WEBHOOK_LATE_DELAY,
// SANDBOX_WEBHOOK_FAULT_RATES) are documented in
// internal/sandboxprovider.ConfigFromEnv. The secret is never logged.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	healthcheckpkg "github.com/example/payment-service/internal/healthcheck"
	"github.com/example/payment-service/internal/sandboxprovider"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := "serve"
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, os.Getenv)
	case "healthcheck":
		err = healthcheck(ctx, os.Getenv)
	default:
		err = fmt.Errorf("unknown command %q; usage: sandbox-provider [serve | healthcheck]", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-provider:", err)
		os.Exit(1)
	}
}

func addr(getenv func(string) string) string {
	if a := getenv("SANDBOX_ADDR"); a != "" {
		return a
	}
	return ":8081"
}

func serve(ctx context.Context, getenv func(string) string) error {
	cfg, err := sandboxprovider.ConfigFromEnv(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	srv, err := sandboxprovider.Start(addr(getenv), cfg)
	if err != nil {
		return err
	}
	logger.Info("sandbox provider serving", "url", srv.URL, "latency", cfg.Latency, "fault_rates", cfg.FaultRates, "seed", cfg.Seed,
		"webhook_url", cfg.Webhooks.URL, "webhook_fault_rates", cfg.Webhooks.FaultRates)
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	logger.Info("sandbox provider stopped")
	return err
}

// healthcheck is the container's HEALTHCHECK: the runtime image has no curl.
func healthcheck(ctx context.Context, getenv func(string) string) error {
	if err := healthcheckpkg.Probe(ctx, addr(getenv), "/healthz"); err != nil {
		return fmt.Errorf("not healthy (SANDBOX_ADDR %s): %w", addr(getenv), err)
	}
	return nil
}
