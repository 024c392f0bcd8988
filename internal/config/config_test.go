package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/config"
)

func env(overrides map[string]string) func(string) string {
	vars := map[string]string{
		"DATABASE_URL":         "postgres://localhost/payments",
		"API_KEYS":             "demo-client:demo-secret",
		"SANDBOX_PROVIDER_URL": "http://127.0.0.1:8081",
	}
	for k, v := range overrides {
		vars[k] = v
	}
	return func(k string) string { return vars[k] }
}

func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != ":8080" || cfg.IdempotencyLockTimeout != 30*time.Second || cfg.MigrateOnStart ||
		cfg.ProviderTimeout != 10*time.Second || cfg.ProviderConnectTimeout != 2*time.Second ||
		cfg.SandboxProviderURL != "http://127.0.0.1:8081" || len(cfg.APIKeys) != 1 || cfg.APIKeys[0].ClientID != "demo-client" {
		t.Fatalf("defaults = %+v", cfg)
	}
}

// PROVIDER_MAX_REQUEST_AGE is the sandbox's ability, not a setting every
// deployment must tune: unset, it follows the lock and the provider call's
// bound, so shortening the lock alone never stops the start.
func TestProviderMaxRequestAgeFollowsTheLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want time.Duration
	}{
		{"the defaults", nil, 10 * time.Second},
		{"a shorter lock", map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "8s", "PROVIDER_TIMEOUT": "3s"}, 5 * time.Second},
		{"a shorter lock, the call's default", map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "20s"}, 10 * time.Second},
		{"the shortest lock", map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "1s", "PROVIDER_TIMEOUT": "500ms"}, 500 * time.Millisecond},
		{"set", map[string]string{"PROVIDER_MAX_REQUEST_AGE": "3s"}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ProviderMaxRequestAge != tc.want {
				t.Fatalf("PROVIDER_MAX_REQUEST_AGE = %s, want %s", cfg.ProviderMaxRequestAge, tc.want)
			}
		})
	}
}

func TestLoadRejectsBadValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	wantRejected(t, []rejection{
		{"no database", map[string]string{"DATABASE_URL": ""}, "DATABASE_URL"},
		{"no keys", map[string]string{"API_KEYS": ""}, "API_KEYS"},
		{"key without client", map[string]string{"API_KEYS": "secret"}, "API_KEYS"},
		{"duplicate client", map[string]string{"API_KEYS": "a:x,a:y"}, "API_KEYS"},
		{"bad address", map[string]string{"HTTP_ADDR": "8080"}, "HTTP_ADDR"},
		{"bad bool", map[string]string{"MIGRATE_ON_START": "yes please"}, "MIGRATE_ON_START"},
		{"bad duration", map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "30"}, "IDEMPOTENCY_LOCK_TIMEOUT"},
		{"lock too short", map[string]string{"IDEMPOTENCY_LOCK_TIMEOUT": "10ms"}, "IDEMPOTENCY_LOCK_TIMEOUT"},
		{"no provider URL", map[string]string{"SANDBOX_PROVIDER_URL": ""}, "SANDBOX_PROVIDER_URL"},
		{"provider URL without scheme", map[string]string{"SANDBOX_PROVIDER_URL": "127.0.0.1:8081"}, "SANDBOX_PROVIDER_URL"},
		{"provider call outlives half the lock", map[string]string{"PROVIDER_TIMEOUT": "16s"}, "PROVIDER_TIMEOUT"},
		{"connect longer than the call", map[string]string{"PROVIDER_TIMEOUT": "1s", "PROVIDER_CONNECT_TIMEOUT": "2s"}, "PROVIDER_CONNECT_TIMEOUT"},
		{"request bound outlasts what the lock leaves", map[string]string{"PROVIDER_MAX_REQUEST_AGE": "21s"}, "PROVIDER_MAX_REQUEST_AGE"},
		{"bad level", map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{"bad pool", map[string]string{"DATABASE_MAX_CONNS": "0"}, "DATABASE_MAX_CONNS"},
		{"unknown provider", map[string]string{"PAYMENT_PROVIDER": "acme"}, "PAYMENT_PROVIDER"},
		{"stripe without its key", map[string]string{"PAYMENT_PROVIDER": "stripe"}, "STRIPE_SECRET_KEY"},
		{"stripe's base with /v1", map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_x", "STRIPE_API_BASE": "http://127.0.0.1:12111/v1"}, "STRIPE_API_BASE"},
		{"stripe's base not a URL", map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_x", "STRIPE_API_BASE": "127.0.0.1:12111"}, "STRIPE_API_BASE"},
		{"stripe's webhook secret too short", map[string]string{"PAYMENT_PROVIDER": "stripe", "STRIPE_SECRET_KEY": "sk_test_x", "STRIPE_WEBHOOK_SECRET": "whsec_1"}, "STRIPE_WEBHOOK_SECRET"},
	})
}

// With PAYMENT_PROVIDER=stripe the sandbox's URL is not needed, Stripe's
// own API is the default base, and the secrets never print.
func TestLoadStripe(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(map[string]string{"PAYMENT_PROVIDER": "stripe", "SANDBOX_PROVIDER_URL": "", //nolint:gosec // G101: the test's own keys
		"STRIPE_SECRET_KEY": "sk_test_secret_value", "STRIPE_WEBHOOK_SECRET": "whsec_secret_value_long"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PaymentProvider != config.ProviderStripe || cfg.Stripe.APIBase != "https://api.stripe.com" ||
		string(cfg.Stripe.SecretKey.Bytes()) != "sk_test_secret_value" || string(cfg.Stripe.WebhookSecret.Bytes()) != "whsec_secret_value_long" {
		t.Fatalf("cfg = %+v", cfg.Stripe)
	}
	if printed := fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg); strings.Contains(printed, "secret_value") {
		t.Fatal("a Stripe secret prints")
	}
	if def, err := config.Load(env(nil)); err != nil || def.PaymentProvider != config.ProviderSandbox {
		t.Fatalf("the default provider is %q (%v), want the sandbox", def.PaymentProvider, err)
	}
}

// Two clients with one key would be one client to the auth middleware:
// every request attributed to whichever it matched last. The error names
// both clients and never the key.
func TestLoadRejectsOneKeyForTwoClients(t *testing.T) {
	t.Parallel()
	_, err := config.Load(env(map[string]string{"API_KEYS": "alpha:shared-secret, beta:own-secret ,gamma:shared-secret"}))
	if err == nil {
		t.Fatal("two clients with the same key were accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "API_KEYS:") || !strings.Contains(msg, `"alpha"`) || !strings.Contains(msg, `"gamma"`) ||
		strings.Contains(msg, `"beta"`) || strings.Contains(msg, "secret") {
		t.Fatalf("err = %q: want API_KEYS naming alpha and gamma, without beta or any key", msg)
	}
}

func TestLoadNeverEchoesAPIKeys(t *testing.T) {
	t.Parallel()
	_, err := config.Load(env(map[string]string{"API_KEYS": "good:topsecret,broken-topsecret2"}))
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("err = %v: must fail without echoing key material", err)
	}
}

// rejection is an environment the service must refuse, and the variable the
// error must name.
type rejection struct {
	name string
	env  map[string]string
	want string
}

// wantRejected checks that Load refuses each environment with an error
// naming its variable ("NAME: ...").
func wantRejected(t *testing.T, tests []rejection) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want+":") {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// Each stage of the shutdown has its own bound (service.Run): defaults that
// fit a 30s grace, and a value outside its range names its variable.
func TestShutdownStagesHaveBoundsOfTheirOwn(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ShutdownTimeout != 15*time.Second || cfg.ShutdownJobsTimeout != 5*time.Second ||
		cfg.ShutdownConsumerTimeout != 5*time.Second || cfg.ShutdownRelayTimeout != 3*time.Second {
		t.Fatalf("shutdown bounds = %s, %s, %s, %s; want 15s, 5s, 5s, 3s",
			cfg.ShutdownTimeout, cfg.ShutdownJobsTimeout, cfg.ShutdownConsumerTimeout, cfg.ShutdownRelayTimeout)
	}
	cfg, err = config.Load(env(map[string]string{"SHUTDOWN_RELAY_TIMEOUT": "20s", "SHUTDOWN_JOBS_TIMEOUT": "1s", "SHUTDOWN_CONSUMER_TIMEOUT": "2s"}))
	if err != nil || cfg.ShutdownRelayTimeout != 20*time.Second || cfg.ShutdownJobsTimeout != time.Second || cfg.ShutdownConsumerTimeout != 2*time.Second {
		t.Fatalf("Load = %+v, %v; want the bounds set", cfg, err)
	}
	wantRejected(t, []rejection{
		{"relay bound too short", map[string]string{"SHUTDOWN_RELAY_TIMEOUT": "1ms"}, "SHUTDOWN_RELAY_TIMEOUT"},
		{"jobs bound not a duration", map[string]string{"SHUTDOWN_JOBS_TIMEOUT": "5"}, "SHUTDOWN_JOBS_TIMEOUT"},
		{"consumer bound too long", map[string]string{"SHUTDOWN_CONSUMER_TIMEOUT": "1h"}, "SHUTDOWN_CONSUMER_TIMEOUT"},
	})
}
