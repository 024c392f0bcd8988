package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/example/payment-service/internal/config"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// The dev broker holds every topic the service reads or writes with the
// dev defaults (a topic left out fails its consumer or its relay at
// start), and the saga's client has a key, so the tour can read the
// payment of a saga step.
func TestDevStackHasTheServicesTopicsAndTheSagasKey(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(func(name string) string {
		switch name {
		case "DATABASE_URL":
			return "postgres://dev@127.0.0.1:1/dev"
		case "KAFKA_BROKERS":
			return "127.0.0.1:9092"
		case "SANDBOX_PROVIDER_URL":
			return "http://127.0.0.1:8081"
		}
		return devDefaults[name]
	})
	if err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{}
	for _, topic := range devTopics {
		made[topic.name] = true
	}
	for _, topic := range []string{cfg.OrderConsumer.Topic, cfg.OrderConsumer.DLTTopic, cfg.PaymentEventsTopic,
		cfg.Saga.CommandsTopic, cfg.Saga.CommandsDLTTopic, cfg.Saga.RepliesTopic} {
		if !made[topic] {
			t.Errorf("the service uses topic %s, which make dev does not create", topic)
		}
	}
	keyed := false
	for _, k := range cfg.APIKeys {
		keyed = keyed || k.ClientID == cfg.Saga.ClientID
	}
	if !keyed {
		t.Errorf("the saga's client %q has no key in the dev API_KEYS %q", cfg.Saga.ClientID, devDefaults["API_KEYS"])
	}
}

// The dev provider's webhooks (the sandbox's, or the Stripe fake's) go to
// the service's own address (a wildcard listener is reached on loopback),
// to the provider's endpoint, with a generated secret unless one is given;
// the URL variable set empty turns them off. Not parallel: it sets the
// environment.
func TestWebhooksFor(t *testing.T) {
	tests := []struct {
		name     string
		provider string
		addr     string
		env      map[string]string
		wantURL  string
		secret   string // "" means generated
	}{
		{"the dev default", "sandbox", "127.0.0.1:8080", nil, "http://127.0.0.1:8080/webhooks/sandbox", ""},
		{"a wildcard listener", "sandbox", ":9000", nil, "http://127.0.0.1:9000/webhooks/sandbox", ""},
		{"turned off", "sandbox", "127.0.0.1:8080", map[string]string{"SANDBOX_WEBHOOK_URL": ""}, "", ""},
		{"a URL and a secret of one's own", "sandbox", "127.0.0.1:8080",
			map[string]string{"SANDBOX_WEBHOOK_URL": "http://127.0.0.1:7000/hook", "SANDBOX_WEBHOOK_SECRET": "mine"}, "http://127.0.0.1:7000/hook", "mine"},
		{"Stripe's", "stripe", "127.0.0.1:8080", nil, "http://127.0.0.1:8080/webhooks/stripe", ""},
		{"Stripe's, turned off", "stripe", "127.0.0.1:8080", map[string]string{"STRIPE_FAKE_WEBHOOK_URL": ""}, "", ""},
		{"Stripe's, with the service's secret", "stripe", "127.0.0.1:8080",
			map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_mine"}, "http://127.0.0.1:8080/webhooks/stripe", "whsec_mine"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"SANDBOX_WEBHOOK_URL", "SANDBOX_WEBHOOK_SECRET", "STRIPE_FAKE_WEBHOOK_URL", "STRIPE_WEBHOOK_SECRET"} {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				} else {
					unsetenv(t, k)
				}
			}
			w := webhooksFor(tc.addr, tc.provider)
			if w.url != tc.wantURL {
				t.Errorf("url %q, want %q", w.url, tc.wantURL)
			}
			if tc.secret != "" && w.secret != tc.secret || tc.secret == "" && (!strings.HasPrefix(w.secret, "whsec_dev_") || len(w.secret) < 30) {
				t.Errorf("secret %q", w.secret)
			}
			if other := webhooksFor(tc.addr, tc.provider); tc.secret == "" && other.secret == w.secret {
				t.Error("two runs share a generated secret")
			}
		})
	}
}

// unsetenv removes name from the environment for the rest of the test.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // restored after the test
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// The tour's lost answer (docs/tour.md, step 5), on the stack `make dev`
// runs (run, with its webhooks wired as make dev wires them), with each
// provider: the sandbox (a drop_ reference) and, with
// PAYMENT_PROVIDER=stripe, the Stripe fake (its pm_fake_lostAnswer). The
// provider charges and drops the connection, the service answers 503
// outcome-unknown (or already 201, when the webhook came first), and
// within a second, before any retry, the provider's webhook has made the
// payment SUCCEEDED. The retry is then answered from the record: the
// provider was asked once and charged once. Not parallel: it sets the
// environment.
func TestLostAnswerIsResolvedByTheWebhook(t *testing.T) {
	tests := []struct {
		provider string
		body     string
		external string
		// asked checks the provider: one charge for the external payment,
		// asked for once, its event delivered once.
		asked func(t *testing.T, ctx context.Context, stack devStack)
	}{
		{"sandbox", `{"orderId":1003,"customerId":7,"amount":"19.99","currency":"EUR","paymentProvider":"sandbox","externalPaymentId":"drop_tour_1"}`, "drop_tour_1",
			func(t *testing.T, ctx context.Context, stack devStack) {
				ledger, err := sandboxprovider.FetchLedger(ctx, stack.providerURL)
				if err != nil {
					t.Fatal(err)
				}
				if got := ledger.Succeeded("drop_tour_1"); len(got) != 1 || got[0].Requests != 1 {
					t.Fatalf("the provider's charges for drop_tour_1: %+v, want one, asked for once", got)
				}
				if w := ledger.Webhooks; w.Events != 1 || w.Deliveries != 1 {
					t.Fatalf("the provider's webhooks: %+v, want one event delivered once", w)
				}
			}},
		{"stripe", `{"orderId":1003,"customerId":7,"amount":"19.99","currency":"EUR","paymentProvider":"stripe","externalPaymentId":"pi_lost_tour_1","paymentMethod":"pm_fake_lostAnswer"}`, "pi_lost_tour_1",
			func(t *testing.T, _ context.Context, stack devStack) {
				f := stack.stripe
				if f == nil {
					t.Fatal("make dev with PAYMENT_PROVIDER=stripe started no Stripe fake")
				}
				l := f.Ledger()
				if len(l.PaymentIntents) != 1 || l.PaymentIntents[0].Status != "succeeded" || l.PaymentIntents[0].AmountReceived != 1999 ||
					f.Received("stripe:pi_lost_tour_1") != 1 || l.Executed["stripe:pi_lost_tour_1"] != 1 {
					t.Fatalf("the Stripe fake holds %+v after %d POSTs under the key; want one succeeded PaymentIntent of 1999, asked for once",
						l.PaymentIntents, f.Received("stripe:pi_lost_tour_1"))
				}
				if n := len(f.Events()); n != 1 || f.Delivered() != 1 {
					t.Fatalf("the Stripe fake's events: %d made, %d delivered; want one delivered once", n, f.Delivered())
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.provider, func(t *testing.T) {
			for _, name := range []string{"HTTP_ADDR", "DEV_KAFKA_PORT", "DEV_PROVIDER_PORT"} {
				port := freeTestPort(t)
				if name == "HTTP_ADDR" {
					t.Setenv(name, "127.0.0.1:"+strconv.Itoa(port))
				} else {
					t.Setenv(name, strconv.Itoa(port))
				}
			}
			t.Setenv("LOG_LEVEL", "warn")
			t.Setenv("PAYMENT_PROVIDER", tc.provider)
			for _, name := range []string{"KAFKA_BROKERS", "SANDBOX_PROVIDER_URL", "SANDBOX_WEBHOOK_URL", "SANDBOX_WEBHOOK_SECRET", "WEBHOOK_SECRETS", "SANDBOX_FAULT_RATES",
				"STRIPE_API_BASE", "STRIPE_SECRET_KEY", "STRIPE_WEBHOOK_SECRET", "STRIPE_FAKE_WEBHOOK_URL", "STRIPE_FAKE_LATENCY"} {
				unsetenv(t, name)
			}
			stack, ctx := runDev(t)
			base := "http://" + stack.addr
			db, err := pgx.Connect(ctx, stack.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(context.Background())

			first := call(t, base+"/payments", "lost-tour-1", tc.body)
			answered := time.Now()
			if first.status != http.StatusServiceUnavailable && first.status != http.StatusCreated {
				t.Fatalf("the charge whose answer is lost: %d %s, want 503 outcome-unknown (or 201, the webhook first)", first.status, first.body)
			}

			// Before any retry: the payment, read back over the API.
			var id int64
			status := ""
			for time.Since(answered) < time.Second && status != "SUCCEEDED" {
				if id == 0 {
					_ = db.QueryRow(ctx, `SELECT id FROM payment WHERE external_payment_id = $1`, tc.external).Scan(&id)
				}
				if id != 0 {
					a := call(t, base+"/payments/"+strconv.FormatInt(id, 10), "", "")
					var p struct{ Status string }
					if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &p) != nil {
						t.Fatalf("GET payment %d: %d %s", id, a.status, a.body)
					}
					status = p.Status
				}
				time.Sleep(10 * time.Millisecond)
			}
			if status != "SUCCEEDED" {
				t.Fatalf("payment %d is %q a second after the lost answer, want SUCCEEDED by the webhook", id, status)
			}

			retry := call(t, base+"/payments", "lost-tour-1", tc.body)
			if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the retry: %d %s, want the stored 201, replayed", retry.status, retry.body)
			}
			tc.asked(t, ctx, stack)
		})
	}
}

// runDev runs make dev's stack (run) until the test ends, and returns it
// once the service is ready, with a context that ends with the test.
func runDev(t *testing.T) (devStack, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stacks := make(chan devStack, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(s devStack) { stacks <- s }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return within 30s of its context's end")
		}
	})
	var stack devStack
	select {
	case stack = <-stacks:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the dev stack did not start within 2 minutes")
	}
	waitReady(t, "http://"+stack.addr)
	return stack, ctx
}

type httpAnswer struct {
	status int
	header http.Header
	body   string
}

// call sends one request to the service with the demo key: a charge
// under key when body is set, a read otherwise.
func call(t *testing.T, url, key, body string) httpAnswer {
	t.Helper()
	method, payload := http.MethodGet, io.Reader(http.NoBody)
	if body != "" {
		method, payload = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, payload)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer demo-secret")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	var b []byte
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return httpAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// waitReady waits for the service's /readyz to answer 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the service was not ready within a minute")
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
