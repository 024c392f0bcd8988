// Command payment-service runs the payment service.
//
//	payment-service [serve]               serve HTTP (the default)
//	payment-service migrate up|down|status
//	payment-service cleanup               run the retention and completer jobs once
//	payment-service reconcile [-from T] [-to T] [-report FILE] [-account ID]
//	                                      reconcile a window once (docs/reconciliation.md)
//	payment-service healthcheck           exit 0 if the local server is ready
//
// Configuration comes from the environment; see docs/operations.md.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/example/payment-service/db/migrations"
	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/config"
	healthcheckpkg "github.com/example/payment-service/internal/healthcheck"
	"github.com/example/payment-service/internal/provider/payoutreport"
	"github.com/example/payment-service/internal/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "payment-service:", err)
		os.Exit(1)
	}
}

const usage = `usage: payment-service [serve | migrate up|down|status | cleanup | reconcile [-from T] [-to T] [-report FILE] [-account ID] | healthcheck]`

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, getenv, stdout)
	case "migrate":
		if len(args) != 1 {
			return fmt.Errorf("%s", usage)
		}
		return migrate(ctx, args[0], getenv, stdout)
	case "cleanup":
		return cleanup(ctx, getenv, stdout)
	case "reconcile":
		return reconcile(ctx, args, getenv, stdout)
	case "healthcheck":
		return healthcheck(ctx, getenv)
	case "help", "-h", "--help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

func serve(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	svc, err := service.New(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}

// cleanup runs the background jobs once, for operators. It reads
// the same configuration as serve.
func cleanup(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	return service.Cleanup(ctx, cfg, logger)
}

// reconcile runs one reconciliation of a window, by default the last
// RECONCILE_WINDOW, and prints the run. With -report, the provider's side
// is that itemized payout reconciliation CSV (of the account -account, if
// given): read whole first, so a bad report stores nothing.
func reconcile(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	flags := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	flags.SetOutput(stdout)
	now := time.Now().UTC().Truncate(time.Second)
	from := flags.String("from", now.Add(-cfg.Reconciliation.Window).Format(time.RFC3339), "the window's start (RFC 3339)")
	to := flags.String("to", now.Format(time.RFC3339), "the window's end, excluded (RFC 3339)")
	reportFile := flags.String("report", "", "an itemized payout reconciliation report (CSV) to read the provider's side from")
	account := flags.String("account", "", "the account the report must be of (connected_account_id)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	window := [2]time.Time{}
	for i, v := range []string{*from, *to} {
		if window[i], err = time.Parse(time.RFC3339Nano, v); err != nil {
			return fmt.Errorf("reconcile: %q is not an RFC 3339 time", v)
		}
	}
	var report app.ProviderLedger
	if *reportFile != "" {
		f, err := os.Open(*reportFile)
		if err != nil {
			return err
		}
		books, err := payoutreport.Parse(f, payoutreport.Options{Account: *account})
		_ = f.Close() // read whole; nothing to lose
		if err != nil {
			return fmt.Errorf("%s: %w", *reportFile, err)
		}
		report = payoutreport.Ledger{Report: books}
	}
	logger := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	run, err := service.Reconcile(ctx, cfg, logger, window[0], window[1], report)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "run %d: %d matched, %d found (%d opened, %d closed), %d still settling\n",
		run.ID, run.Matched, run.Found, run.Opened, run.Closed, run.Expected)
	return err
}

func migrate(ctx context.Context, direction string, getenv func(string) string, stdout io.Writer) error {
	dsn, err := config.LoadDatabaseURL(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	// What was done is printed even when a later migration failed; a
	// failed write fails the command too.
	var writeErr error
	report := func(a ...any) {
		if _, err := fmt.Fprintln(stdout, a...); err != nil && writeErr == nil {
			writeErr = err
		}
	}
	switch direction {
	case "up":
		results, err := p.Up(ctx)
		for _, r := range results {
			report(r)
		}
		return errors.Join(err, writeErr)
	case "down":
		r, err := p.Down(ctx)
		if r != nil {
			report(r)
		}
		return errors.Join(err, writeErr)
	case "status":
		statuses, err := p.Status(ctx)
		for _, s := range statuses {
			report(fmt.Sprintf("%-8s %s", s.State, s.Source.Path))
		}
		return errors.Join(err, writeErr)
	default:
		return fmt.Errorf("unknown migrate direction %q\n%s", direction, usage)
	}
}

// healthcheck asks the server on HTTP_ADDR (on loopback) for /readyz. It is
// the container's HEALTHCHECK: the runtime image has no curl.
func healthcheck(ctx context.Context, getenv func(string) string) error {
	addr := getenv("HTTP_ADDR")
	if addr == "" {
		addr = ":8080"
	}
	if err := healthcheckpkg.Probe(ctx, addr, "/readyz"); err != nil {
		return fmt.Errorf("not ready (HTTP_ADDR %s): %w", addr, err)
	}
	return nil
}
