package config

import "strings"

// The payment providers PAYMENT_PROVIDER names.
const (
	ProviderSandbox = "sandbox"
	ProviderStripe  = "stripe"
)

// How the sandbox answers captures, refunds and voids
// (SANDBOX_PROVIDER_MODIFICATIONS, the sandbox's own
// SANDBOX_MODIFICATIONS).
const (
	// ModificationsAtOnce: its answer is the decision.
	ModificationsAtOnce = "at-once"
	// ModificationsReceived: its answer is "received" (202), and the
	// decision comes as its signed event, as Adyen's does.
	ModificationsReceived = "received"
)

// Stripe configures the Stripe provider (internal/provider/stripe), with
// PAYMENT_PROVIDER=stripe.
type Stripe struct {
	// SecretKey (STRIPE_SECRET_KEY, required with PAYMENT_PROVIDER=stripe)
	// is the API key, sk_live_... or sk_test_...
	SecretKey Secret
	// APIBase (STRIPE_API_BASE, default https://api.stripe.com) is
	// stripe-go's base URL, without /v1; tests point it at a loopback
	// stand-in.
	APIBase string
	// WebhookSecret (STRIPE_WEBHOOK_SECRET, whsec_...) verifies the
	// deliveries to POST /webhooks/stripe; unset, that endpoint answers
	// 503 and Stripe delivers again later.
	WebhookSecret Secret
}

// defaultStripeAPIBase is Stripe's own API.
const defaultStripeAPIBase = "https://api.stripe.com"

// paymentProvider reads PAYMENT_PROVIDER and the chosen provider's
// settings: SANDBOX_PROVIDER_URL for the sandbox, STRIPE_* for Stripe.
func (p *parser) paymentProvider(cfg *Config) {
	cfg.PaymentProvider = p.str("PAYMENT_PROVIDER", ProviderSandbox, false)
	switch cfg.PaymentProvider {
	case ProviderSandbox:
		cfg.SandboxProviderURL = p.httpURL("SANDBOX_PROVIDER_URL")
		switch cfg.SandboxModifications = p.str("SANDBOX_PROVIDER_MODIFICATIONS", ModificationsAtOnce, false); cfg.SandboxModifications {
		case ModificationsAtOnce, ModificationsReceived:
		default:
			p.fail("SANDBOX_PROVIDER_MODIFICATIONS", "must be %s or %s (as the sandbox's SANDBOX_MODIFICATIONS), got %q",
				ModificationsAtOnce, ModificationsReceived, cfg.SandboxModifications)
		}
	case ProviderStripe:
		if v := p.str("SANDBOX_PROVIDER_URL", "", false); v != "" {
			cfg.SandboxProviderURL = p.checkHTTPURL("SANDBOX_PROVIDER_URL", v, "http://127.0.0.1:8081")
		}
		cfg.Stripe = p.stripe()
	default:
		p.fail("PAYMENT_PROVIDER", "must be %s or %s, got %q", ProviderSandbox, ProviderStripe, cfg.PaymentProvider)
	}
}

func (p *parser) stripe() Stripe {
	s := Stripe{SecretKey: Secret{value: []byte(p.str("STRIPE_SECRET_KEY", "", true))}}
	base := p.str("STRIPE_API_BASE", defaultStripeAPIBase, false)
	if strings.HasSuffix(strings.TrimRight(base, "/"), "/v1") {
		p.fail("STRIPE_API_BASE", "is stripe-go's base URL, without /v1 (such as %s); got %q", defaultStripeAPIBase, base)
	} else {
		s.APIBase = p.checkHTTPURL("STRIPE_API_BASE", base, defaultStripeAPIBase)
	}
	if v := p.str("STRIPE_WEBHOOK_SECRET", "", false); v != "" {
		if len(v) < minSecretLength {
			p.fail("STRIPE_WEBHOOK_SECRET", "is shorter than %d characters", minSecretLength)
		}
		s.WebhookSecret = Secret{value: []byte(v)}
	}
	return s
}
