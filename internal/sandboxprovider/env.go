package sandboxprovider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ConfigFromEnv reads a Config from the environment, for
// cmd/sandbox-provider and `make dev`:
//
//	SANDBOX_LATENCY      processing time of a new charge (default 0)
//	SANDBOX_SLOW_DELAY   how late slow_ answers come (default 15s)
//	SANDBOX_FAULT_RATES  random faults for other references, e.g. "drop=0.05,bad_gateway=0.02"
//	SANDBOX_FAULT_SEED   seed of the random faults (default 1)
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var cfg Config
	var errs []error
	duration := func(name string) time.Duration {
		v := getenv(name)
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 10*time.Minute {
			errs = append(errs, fmt.Errorf("%s: must be a duration between 0 and 10m, got %q", name, v))
		}
		return d
	}
	cfg.Latency = duration("SANDBOX_LATENCY")
	cfg.SlowDelay = duration("SANDBOX_SLOW_DELAY")
	cfg.Seed = 1
	if v := getenv("SANDBOX_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("SANDBOX_FAULT_SEED: must be an unsigned integer, got %q", v))
		}
		cfg.Seed = seed
	}
	rates, err := ParseFaultRates(getenv("SANDBOX_FAULT_RATES"))
	if err != nil {
		errs = append(errs, fmt.Errorf("SANDBOX_FAULT_RATES: %w", err))
	}
	cfg.FaultRates = rates
	return cfg, errors.Join(errs...)
}

// ParseFaultRates parses "drop=0.05,bad_gateway=0.02" into rates; the rates
// must be in [0,1] and sum to at most 1.
func ParseFaultRates(s string) (map[Fault]float64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[Fault]bool{}
	for _, f := range Faults {
		known[f] = true
	}
	rates := map[Fault]float64{}
	var sum float64
	for item := range strings.SplitSeq(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(item), "=")
		f := Fault(name)
		if !ok || !known[f] {
			return nil, fmt.Errorf("%q: want fault=rate with a fault among %v", item, Faults)
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
