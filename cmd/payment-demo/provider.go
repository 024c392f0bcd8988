package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/example/payment-service/pkg/paymentclient"
)

// The payment provider the stack charges through, as the demo needs it:
// the sandbox (make dev, compose) or Stripe (make dev
// PAYMENT_PROVIDER=stripe: the stateful Stripe fake in Stripe's place). It
// names the provider in each charge, pays with a payment method where the
// provider needs one, asks for a lost answer the provider's way, and shows
// what the provider holds after each step, by the provider's own API.

// The providers the demo knows (the service's PAYMENT_PROVIDER values).
const (
	providerSandbox = "sandbox"
	providerStripe  = "stripe"
)

// The Stripe fake's test payment methods the demo pays with
// (internal/stripefake).
const (
	// pmVisa approves.
	pmVisa = "pm_card_visa"
	// pmLostAnswer approves, and the request that made the PaymentIntent
	// loses its answer.
	pmLostAnswer = "pm_fake_lostAnswer"
)

// devStripeKey is the Stripe fake's API key in make dev (cmd/payment-dev),
// STRIPE_SECRET_KEY's default here too.
const devStripeKey = "sk_test_payment_dev" //nolint:gosec // G101: the dev fake's key, printed by make dev on purpose

// provider is the stack's payment provider.
type provider struct {
	name string // providerSandbox or providerStripe
	url  string // its API, for the demo's reads of what it holds
	key  string // its API key, for those reads (Stripe's)
}

// charge is the demo's charge of orderID (customer 42, 100.50 RUB) as
// externalPaymentID, through the provider: paid with pm_card_visa through
// Stripe.
func (p provider) charge(orderID int64, externalPaymentID string) paymentclient.ChargeRequest {
	req := paymentclient.ChargeRequest{OrderID: orderID, CustomerID: 42, Amount: "100.50", Currency: "RUB",
		PaymentProvider: p.name, ExternalPaymentID: externalPaymentID}
	if p.name == providerStripe {
		req.PaymentMethod = pmVisa
	}
	return req
}

// lostAnswer is a charge of orderID whose answer the provider loses after
// charging: the sandbox's drop_ reference, Stripe's pm_fake_lostAnswer.
func (p provider) lostAnswer(orderID int64) paymentclient.ChargeRequest {
	if p.name == providerStripe {
		req := p.charge(orderID, fmt.Sprintf("pi_demo_lost_%d", orderID))
		req.PaymentMethod = pmLostAnswer
		return req
	}
	return p.charge(orderID, fmt.Sprintf("drop_demo_%d", orderID))
}

// showCharge prints what the provider holds under a charge's provider key:
// the sandbox's charge; Stripe's PaymentIntent whose metadata carries it.
func (d demo) showCharge(ctx context.Context, providerKey string) error {
	if d.prov.name == providerStripe {
		return d.showPaymentIntents(ctx, "provider_key", providerKey)
	}
	_, err := d.getFrom(ctx, d.prov.url, "/v1/charges?idempotency_key="+url.QueryEscape(providerKey))
	return err
}

// showCapture prints what the provider holds under a capture's provider
// key: the sandbox's capture; Stripe's PaymentIntent captured under it.
func (d demo) showCapture(ctx context.Context, captureKey string) error {
	if d.prov.name == providerStripe {
		return d.showPaymentIntents(ctx, "capture_key", captureKey)
	}
	_, err := d.getFrom(ctx, d.prov.url, "/v1/captures?idempotency_key="+url.QueryEscape(captureKey))
	return err
}

// showRefund prints what the provider holds under a refund's provider key:
// the sandbox's refund; the refunds of Stripe's PaymentIntent of the
// payment (paymentKey), each with our key in its metadata.
func (d demo) showRefund(ctx context.Context, paymentKey, refundKey string) error {
	if d.prov.name != providerStripe {
		_, err := d.getFrom(ctx, d.prov.url, "/v1/refunds?idempotency_key="+url.QueryEscape(refundKey))
		return err
	}
	body, err := d.getFrom(ctx, d.prov.url, searchPath("provider_key", paymentKey))
	if err != nil {
		return err
	}
	var found struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &found); err != nil || len(found.Data) != 1 {
		return fmt.Errorf("the search found %d PaymentIntents for %s at Stripe, want 1 (%v)", len(found.Data), paymentKey, err) //nolint:errorlint // err may be nil: the message shows what came back
	}
	_, err = d.getFrom(ctx, d.prov.url, "/v1/refunds?payment_intent="+url.QueryEscape(found.Data[0].ID))
	return err
}

// showPaymentIntents prints the PaymentIntents whose metadata[name] is
// value, by Stripe's search (the fake's search is up to date at once;
// Stripe's lags by up to a minute).
func (d demo) showPaymentIntents(ctx context.Context, name, value string) error {
	_, err := d.getFrom(ctx, d.prov.url, searchPath(name, value))
	return err
}

// searchPath is Stripe's search for the PaymentIntents whose metadata[name]
// is value.
func searchPath(name, value string) string {
	return "/v1/payment_intents/search?query=" + url.QueryEscape("metadata['"+name+"']:'"+value+"'")
}

// detectProvider is the provider at providerURL: PAYMENT_PROVIDER when it
// is set (as for make dev), else the one whose answer to GET /v1/ledger it
// is: the sandbox's ledger (200), or Stripe's error object (the fake does
// not know the path). A provider that cannot be asked is taken for the
// sandbox, the dev stack's default.
func detectProvider(ctx context.Context, providerURL, named string) string {
	if named != "" {
		return named
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, providerURL+"/v1/ledger", nil)
	if err != nil {
		return providerSandbox
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return providerSandbox
	}
	defer resp.Body.Close()
	var stripeError struct {
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK && json.Unmarshal(b, &stripeError) == nil && stripeError.Error != nil && stripeError.Error.Type != "" {
		return providerStripe
	}
	return providerSandbox
}
