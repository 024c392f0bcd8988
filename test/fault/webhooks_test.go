//go:build fault

package fault

import (
	"fmt"
	"time"

	"github.com/example/payment-service/internal/sandboxprovider"
)

// webhookCheck is what checkWebhooks found: its violations, and a line
// for the run's summary.
type webhookCheck struct {
	violations violations
	summary    string
}

// checkWebhooks waits (up to within) until the provider has no delivery
// pending, then checks what the webhooks did over the whole run:
//
//   - no delivery was given up (expired) or dropped for a full queue: an
//     event the service did not take was answered 404 or 5xx for the
//     whole retry bound, or never sent;
//   - every event that was not lost on purpose was delivered at least
//     once (a duplicate at least twice);
//   - the service took each of those events exactly once: one
//     processed_event row of its webhook consumer per event delivered;
//   - no event contradicted what the service recorded: the sandbox never
//     changes a decision, so a row in provider_event_contradiction means
//     the service recorded an outcome the provider did not make.
func (c *checker) checkWebhooks(within time.Duration) webhookCheck {
	c.s.t.Helper()
	var v violations
	var w sandboxprovider.WebhookCounters
	deadline := time.Now().Add(within)
	for {
		w = c.s.provider.WebhookCounters()
		if w.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			v.add("%d webhook deliveries still pending %s after the last round", w.Pending, within)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if w.Expired > 0 || w.Dropped > 0 {
		v.add("webhook deliveries given up: %d expired, %d dropped (counters %+v)", w.Expired, w.Dropped, w)
	}
	lost, dup := w.Faults[sandboxprovider.WebhookLost], w.Faults[sandboxprovider.WebhookDuplicate]
	if want := w.Events - lost + dup; w.Deliveries < want {
		v.add("%d webhook deliveries answered 2xx, want at least %d (%d events, %d lost, %d duplicated)", w.Deliveries, want, w.Events, lost, dup)
	}
	if w.Events == 0 {
		v.add("the provider made no webhook event: the run did not test webhooks")
	}
	if n := c.s.count(`SELECT count(*) FROM processed_event WHERE consumer_name = 'webhook:sandbox'`); n != w.Events-lost {
		v.add("the service recorded %d webhook events as processed, want %d (%d events, %d lost)", n, w.Events-lost, w.Events, lost)
	}
	if n := c.s.count(`SELECT count(*) FROM provider_event_contradiction`); n > 0 {
		v.add("%d provider events contradict what the service recorded", n)
	}
	return webhookCheck{violations: v, summary: fmt.Sprintf("%d events, %d deliveries in %d attempts (%d retries), faults %v",
		w.Events, w.Deliveries, w.Attempts, w.Retries, w.Faults)}
}
