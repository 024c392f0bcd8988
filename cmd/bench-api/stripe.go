package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/example/payment-service/internal/stripefake"
)

// -provider stripe: the same create and replay runs with the service
// charging through Stripe, the stateful Stripe fake (internal/stripefake)
// in its place on loopback, in every pass right after the sandbox's, both
// providers answering after -provider-latency. What it reports is the
// service's CPU per request through each adapter and their ratio
// (providerTable): the adapter's own cost, the provider's latency apart,
// which the machine's noise moves far less than requests a second.

// The Stripe fake's API key in the benchmark.
const benchStripeKey = "sk_test_bench" //nolint:gosec // G101: the benchmark fake's own key

// firstStripeReplayKey is the first of the replay keys charged through
// Stripe: a replay names its provider in its body, so each provider's
// replays are charges made through it.
const firstStripeReplayKey = 950_000_001

// stripeTail is the members a charge through Stripe carries instead of the
// sandbox's: its provider and a payment method the fake approves.
const stripeTail = `"paymentProvider":"stripe","paymentMethod":"` + stripefake.PMVisa + `"`

// sandboxTail is the sandbox's.
const sandboxTail = `"paymentProvider":"sandbox"`

// tail is the provider members of the running service's charges.
func (b *bench) tail() string {
	if b.viaStripe {
		return stripeTail
	}
	return sandboxTail
}

// body is a charge of order as external, through the running service's
// provider.
func (b *bench) body(order int64, external string) string {
	return chargeBodyWith(order, external, b.tail())
}

// replayBase is the first replay key charged through the running service's
// provider, and its order: replay key k is that key plus k, for that order
// plus k.
func (b *bench) replayBase() (key int, order int64) {
	if b.viaStripe {
		return firstStripeReplayKey, b.stripeReplayOrder
	}
	return firstReplayKey, 1
}

// providerEnv is the service's settings for its provider: the sandbox's
// URL, or Stripe's (the fake's) with its key.
func (b *bench) providerEnv() []string {
	if b.viaStripe {
		return []string{"PAYMENT_PROVIDER=stripe", "STRIPE_SECRET_KEY=" + benchStripeKey, "STRIPE_API_BASE=" + b.fake.URL}
	}
	return []string{"SANDBOX_PROVIDER_URL=" + b.provider.URL}
}

// providerTable sets the service's CPU per request through Stripe beside
// the same through the sandbox, run by run of the same passes: medians,
// and the median of the per-pass ratios (Stripe over the sandbox).
func providerTable(o options, runs map[string][]result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The service's CPU per request through Stripe (the stateful fake) against the sandbox, both answering after %s, medians of %d passes, %s each:\n\n",
		o.providerLatency, o.passes, o.duration)
	b.WriteString("| workload | C | sandbox req/s | CPU µs/req | Stripe req/s | CPU µs/req | Stripe / sandbox CPU per request (per-pass ratios) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, w := range []struct {
		workload string
		cs       []int
	}{{"create", o.createC}, {"replay", o.replayC}} {
		for _, c := range w.cs {
			sandbox, stripe := runs[name("service", w.workload, c)], runs[name("stripe", w.workload, c)]
			var ratios []float64
			for i := range min(len(sandbox), len(stripe)) {
				if sandbox[i].CPUPerRequest > 0 {
					ratios = append(ratios, float64(stripe[i].CPUPerRequest)/float64(sandbox[i].CPUPerRequest))
				}
			}
			ratio := "-"
			if len(ratios) > 0 {
				ratio = ratioText(ratios)
			}
			s, t := median(sandbox), median(stripe)
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %s |\n", w.workload, c,
				s.PerSecond, us(s.CPUPerRequest), t.PerSecond, us(t.CPUPerRequest), ratio)
		}
	}
	return b.String()
}

// stripeEnabled reports -provider stripe; the flag takes "" (the sandbox
// alone) or stripe.
func (o options) stripeEnabled() bool { return o.provider == "stripe" }

// replayKeyArgs are wrk's script's replay arguments: the first replay key
// and its order, and how many there are.
func (b *bench) replayKeyArgs() []string {
	key, order := b.replayBase()
	return []string{strconv.Itoa(key), strconv.FormatInt(order, 10), strconv.Itoa(replayKeys)}
}
