package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// receivedClient is a client of a sandbox run in its received mode, as
// the service builds it then (sandbox.Config.Modifications).
func receivedClient(t *testing.T, baseURL string) *sandbox.Client {
	t.Helper()
	c, err := sandbox.New(sandbox.Config{BaseURL: baseURL, ConnectTimeout: time.Second, Timeout: 300 * time.Millisecond,
		Modifications: app.AnswersReceived})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A capture, refund and void at the sandbox in its received mode, over a
// real connection: every answer sorts into the outcome model. A receipt
// is "received"; the lookup knows nothing until the decision (unknown),
// then the decision, a failure among them; the faults of a reference are
// what they are at once; and the client declares what it is.
func TestReceivedModificationsSortIntoTheOutcomeModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		external string
		kinds    string // the kinds the case fits: a void meets its authorization's reference, which a decline never lets be held
		call     string // the call's case
		lookup   string // the lookup's, once the provider has decided
	}{
		{"pi_ok", "refund capture void", string(app.ProviderReceived), string(app.ProviderApproved)},
		{"decline_card", "refund capture", string(app.ProviderReceived), string(app.ProviderDeclined)},
		{"modfail_later", "refund capture void", string(app.ProviderReceived), string(app.ProviderFailed)},
		{"drop_answer", "refund capture void", "unknown", string(app.ProviderApproved)},
		{"gw502_answer", "refund capture void", "unknown", string(app.ProviderApproved)},
		{"fail_down", "refund capture", "not charged", "no charge"},
		{"refuse_invalid", "refund capture", "refused", "no charge"},
	}
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{Modifications: sandboxprovider.ModificationsReceived,
		ModificationDelay: time.Hour, SlowDelay: 3 * time.Second})
	prepare(t, provider)
	c := receivedClient(t, provider.URL)
	if m := c.Abilities().Modifications; m != app.AnswersReceived {
		t.Fatalf("Abilities().Modifications = %v, want AnswersReceived", m)
	}
	if m := client(t, provider.URL).Abilities().Modifications; m != app.AnswersAtOnce {
		t.Fatalf("a client of the sandbox at once declares %v", m)
	}
	ctx := context.Background()
	for _, k := range append([]opKind{opKinds[1], opKinds[3]}, voidKind) {
		for _, tc := range tests {
			if !strings.Contains(tc.kinds, k.name) {
				continue
			}
			t.Run(k.name+"/"+tc.external, func(t *testing.T) {
				if k.prepare != nil {
					k.prepare(t, provider, tc.external)
				}
				if got := outcome(k.create(t, c, tc.external)); got != tc.call {
					t.Fatalf("the call: %s, want %s", got, tc.call)
				}
				key := k.key(t, tc.external)
				before := outcome(k.lookup(c, ctx, key))
				if want := map[bool]string{true: "unknown", false: "no charge"}[tc.lookup != "no charge"]; before != want {
					t.Fatalf("the lookup before the decision: %s, want %s", before, want)
				}
				if tc.call != "unknown" && tc.call != string(app.ProviderReceived) {
					return
				}
				// The same request again gets the receipt, as the first
				// answer of the key.
				if got := outcome(k.create(t, c, tc.external)); got != string(app.ProviderReceived) {
					t.Fatalf("the same call again: %s, want the receipt", got)
				}
				provider.DecideReceived()
				if got := outcome(k.lookup(c, ctx, key)); got != tc.lookup {
					t.Fatalf("the lookup after the decision: %s, want %s", got, tc.lookup)
				}
			})
		}
	}
}

// A 202 is a receipt only from the sandbox, for the request, and for a
// capture, refund or void; "failed" is a decision of a modification only.
func TestReceivedAnswersFromSomethingElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   map[string]string // by kind; "" for the kinds not listed: want
		other  string
	}{
		{"202 received, the request's", 202, `{"id":"x_1","status":"received","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`,
			map[string]string{"refund": string(app.ProviderReceived), "capture": string(app.ProviderReceived)}, "unknown"},
		{"202 for another amount", 202, `{"id":"x_1","status":"received","amount":"99","currency":"RUB","reference":"pi_1"CHARGE}`, nil, "unknown"},
		{"202 with a decision", 202, `{"id":"x_1","status":"succeeded","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`, nil, "unknown"},
		{"202 not JSON", 202, `<html>Accepted</html>`, nil, "unknown"},
		{"200 failed", 200, `{"id":"x_1","status":"failed","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`,
			map[string]string{"refund": string(app.ProviderFailed), "capture": string(app.ProviderFailed)}, "unknown"},
		{"200 received", 200, `{"id":"x_1","status":"received","amount":"10.50","currency":"RUB","reference":"pi_1"CHARGE}`, nil, "unknown"},
	}
	charges := map[string]string{"charge": "", "refund": `,"charge":"` + refund(t, "pi_1").ChargeKey + `"`,
		"authorization": "", "capture": `,"authorization":"` + capture(t, "pi_1").AuthorizationKey + `"`}
	for _, k := range opKinds {
		for _, tc := range tests {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				want, ok := tc.want[k.name]
				if !ok {
					want = tc.other
				}
				body := strings.NewReplacer("CHARGE", charges[k.name]).Replace(tc.body)
				if got := outcome(k.create(t, answeredBy(t, tc.status, body), "pi_1")); got != want {
					t.Fatalf("outcome = %s, want %s", got, want)
				}
			})
		}
	}
}
