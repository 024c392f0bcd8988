package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// An error of the adapter is the port's error (what the use case sorts by)
// and, beside it, what went wrong: a cancelled context, a refused
// connection or a timeout stay recognisable by errors.Is and errors.As
// under the port's error, and the use case sorts the answer as it did
// without them.
func TestAnErrorOfTheAdapterKeepsItsCause(t *testing.T) {
	t.Parallel()
	provider := sandboxprovider.StartForTest(t, sandboxprovider.Config{SlowDelay: 3 * time.Second})
	patient, err := sandbox.New(sandbox.Config{BaseURL: provider.URL, ConnectTimeout: time.Second, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	timedOut := func(err error) bool {
		var netErr net.Error
		return errors.As(err, &netErr) && netErr.Timeout()
	}
	unreadable := func(err error) bool {
		var syntax *json.SyntaxError
		return errors.As(err, &syntax)
	}
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

	tests := []struct {
		name   string
		call   func() (app.ProviderDecision, error)
		port   error              // the port's error
		answer app.ProviderAnswer // how the use case sorts it
		cause  func(error) bool
	}{
		{"a connection refused (nothing listens on port 1): not sent",
			func() (app.ProviderDecision, error) {
				return client(t, "http://127.0.0.1:1").Charge(t.Context(), charge(t, "pi_refused"))
			},
			app.ErrProviderNotCharged, app.AnswerNotNow, is(syscall.ECONNREFUSED)},
		{"a context cancelled before the request left",
			func() (app.ProviderDecision, error) { return patient.Charge(cancelled, charge(t, "pi_cancelled")) },
			app.ErrProviderNotCharged, app.AnswerNotNow, is(context.Canceled)},
		{"sent, and no answer within the client's timeout",
			func() (app.ProviderDecision, error) {
				return client(t, provider.URL).Charge(t.Context(), charge(t, "slow_timeout"))
			},
			app.ErrProviderOutcomeUnknown, app.AnswerUnknown, timedOut},
		{"sent, and the context ended before the answer",
			func() (app.ProviderDecision, error) {
				ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				defer cancel()
				return patient.Charge(ctx, charge(t, "slow_deadline"))
			},
			app.ErrProviderOutcomeUnknown, app.AnswerUnknown, is(context.DeadlineExceeded)},
		{"an answer that is not JSON",
			func() (app.ProviderDecision, error) {
				return answeredBy(t, 200, "charged?").Charge(t.Context(), charge(t, "pi_garbled"))
			},
			app.ErrProviderOutcomeUnknown, app.AnswerUnknown, unreadable},
		{"a lookup whose context was cancelled",
			func() (app.ProviderDecision, error) {
				return patient.LookupCharge(cancelled, charge(t, "pi_lookup_cancelled"))
			},
			app.ErrProviderOutcomeUnknown, app.AnswerUnknown, is(context.Canceled)},
		{"a lookup whose answer is not JSON",
			func() (app.ProviderDecision, error) {
				return answeredBy(t, 200, "charged?").LookupCharge(t.Context(), charge(t, "pi_lookup_garbled"))
			},
			app.ErrProviderOutcomeUnknown, app.AnswerUnknown, unreadable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.call()
			if !errors.Is(err, tc.port) {
				t.Fatalf("%v, want %v", err, tc.port)
			}
			if !tc.cause(err) {
				t.Errorf("%v: its cause is not in the chain", err)
			}
			if got := app.AnswerOf(d, err); got != tc.answer {
				t.Errorf("%v: sorted as %s, want %s", err, got, tc.answer)
			}
		})
	}
}
