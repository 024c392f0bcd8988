package sandboxprovider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// ConfigFromEnv reads a Config from the environment, for
// cmd/sandbox-provider and `make dev`:
//
//	SANDBOX_LATENCY      processing time of a new charge (default 0)
//	SANDBOX_SLOW_DELAY   how late slow_ answers come (default 15s)
//	SANDBOX_MAX_REQUEST_AGE  refuse requests older than this (default 10s; the service's PROVIDER_MAX_REQUEST_AGE)
//	SANDBOX_FAULT_RATES  random faults for other references, e.g. "drop=0.05,bad_gateway=0.02"
//	SANDBOX_FAULT_SEED   seed of the random faults, the webhooks' too (default 1)
//	SANDBOX_AUTHORIZATION_TTL  how long an authorization's hold lasts (default 168h, at most 720h)
//	SANDBOX_MODIFICATIONS  at-once (the default) or received: captures, refunds and voids answered 202 "received" and decided later
//	SANDBOX_MODIFICATION_DELAY  how long after its receipt a received modification is decided (default 1s, at most 1h)
//	SANDBOX_MODIFICATION_FAILURE_RATE  the probability that a received modification fails (default 0)
//
// and the balance (BalanceConfig):
//
//	SANDBOX_FEE_PERCENT      the share of a charge the provider keeps, e.g. 2.9 (default 0)
//	SANDBOX_FEE_FIXED        added to every charge's fee, e.g. 0.30 (default 0)
//	SANDBOX_PAYOUT_INTERVAL  how often what is not paid out yet is paid out (default never: POST /v1/payouts)
//	SANDBOX_ACCOUNT          the account's id in its reports (default acct_sandbox)
//
// and the webhooks (WebhookConfig; none unless SANDBOX_WEBHOOK_URL is set):
//
//	SANDBOX_WEBHOOK_URL          where every event is POSTed, e.g. http://127.0.0.1:8080/webhooks/sandbox
//	SANDBOX_WEBHOOK_SECRET       the shared secret deliveries are signed with (required with the URL)
//	SANDBOX_WEBHOOK_RETRY_FOR    how long a delivery is retried (default 10m, at most 72h)
//	SANDBOX_WEBHOOK_LATE_DELAY   how late a late delivery comes (default 45s)
//	SANDBOX_WEBHOOK_FAULT_RATES  random webhook faults, e.g. "duplicate=0.05,lost=0.02"
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var cfg Config
	var errs []error
	duration := func(name string, most time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > most {
			errs = append(errs, fmt.Errorf("%s: must be a duration between 0 and %s, got %q", name, most, v))
		}
		return d
	}
	cfg.Latency = duration("SANDBOX_LATENCY", 10*time.Minute)
	cfg.SlowDelay = duration("SANDBOX_SLOW_DELAY", 10*time.Minute)
	cfg.AuthorizationTTL = duration("SANDBOX_AUTHORIZATION_TTL", 720*time.Hour)
	cfg.MaxRequestAge = 10 * time.Second
	if getenv("SANDBOX_MAX_REQUEST_AGE") != "" {
		cfg.MaxRequestAge = duration("SANDBOX_MAX_REQUEST_AGE", time.Hour)
	}
	cfg.Seed = 1
	if v := getenv("SANDBOX_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("SANDBOX_FAULT_SEED: must be an unsigned integer, got %q", v))
		}
		cfg.Seed = seed
	}
	mode, err := ParseModificationMode(getenv("SANDBOX_MODIFICATIONS"))
	if err != nil {
		errs = append(errs, fmt.Errorf("SANDBOX_MODIFICATIONS: %w", err))
	}
	cfg.Modifications = mode
	cfg.ModificationDelay = duration("SANDBOX_MODIFICATION_DELAY", time.Hour)
	if v := getenv("SANDBOX_MODIFICATION_FAILURE_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			errs = append(errs, fmt.Errorf("SANDBOX_MODIFICATION_FAILURE_RATE: must be a number from 0 to 1, got %q", v))
		}
		cfg.ModificationFailureRate = r
	}
	rates, err := ParseFaultRates(getenv("SANDBOX_FAULT_RATES"))
	if err != nil {
		errs = append(errs, fmt.Errorf("SANDBOX_FAULT_RATES: %w", err))
	}
	cfg.FaultRates = rates
	b := &cfg.Balance
	for _, fee := range []struct {
		name string
		to   *decimal.Decimal
	}{{"SANDBOX_FEE_PERCENT", &b.FeePercent}, {"SANDBOX_FEE_FIXED", &b.FeeFixed}} {
		if v := getenv(fee.name); v != "" {
			d, err := decimal.NewFromString(v)
			if err != nil || d.IsNegative() {
				errs = append(errs, fmt.Errorf("%s: must be a decimal of at least 0, got %q", fee.name, v))
			}
			*fee.to = d
		}
	}
	b.PayoutInterval = duration("SANDBOX_PAYOUT_INTERVAL", 720*time.Hour)
	b.Account = getenv("SANDBOX_ACCOUNT")

	w := &cfg.Webhooks
	w.URL, w.Secret = getenv("SANDBOX_WEBHOOK_URL"), getenv("SANDBOX_WEBHOOK_SECRET")
	if w.URL != "" && w.Secret == "" {
		errs = append(errs, errors.New("SANDBOX_WEBHOOK_SECRET: required with SANDBOX_WEBHOOK_URL (the service refuses unsigned deliveries)"))
	}
	w.RetryFor = duration("SANDBOX_WEBHOOK_RETRY_FOR", 72*time.Hour)
	w.LateDelay = duration("SANDBOX_WEBHOOK_LATE_DELAY", 10*time.Minute)
	w.FaultRates, err = parseRates(getenv("SANDBOX_WEBHOOK_FAULT_RATES"), WebhookFaults)
	if err != nil {
		errs = append(errs, fmt.Errorf("SANDBOX_WEBHOOK_FAULT_RATES: %w", err))
	}
	return cfg, errors.Join(errs...)
}

// ParseFaultRates parses "drop=0.05,bad_gateway=0.02" into rates; the rates
// must be in [0,1] and sum to at most 1.
func ParseFaultRates(s string) (map[Fault]float64, error) { return parseRates(s, Faults) }

// parseRates parses "name=rate,..." for faults of one kind (the calls',
// the webhooks').
func parseRates[F ~string](s string, faults []F) (map[F]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[F]bool{}
	for _, f := range faults {
		known[f] = true
	}
	rates := map[F]float64{}
	var sum float64
	for item := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(item), "=")
		f := F(name)
		if !ok || !known[f] {
			return nil, fmt.Errorf("%q: want fault=rate with a fault among %v", item, faults)
		}
		r, err := strconv.ParseFloat(value, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("%q: the rate must be a number from 0 to 1", item)
		}
		rates[f] = r
		sum += r
	}
	if sum > 1 {
		return nil, fmt.Errorf("the rates sum to %g, more than 1", sum)
	}
	return rates, nil
}
