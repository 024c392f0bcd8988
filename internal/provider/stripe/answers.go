package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
)

// sentFlag follows one POST: whether it was written to a connection, in
// full or in part (from then on Stripe may have acted on it), and the
// status of the answer that came back, if one did.
type sentFlag struct {
	sent   atomic.Bool
	status atomic.Int32
}

type flagKey struct{}

// trace is ctx with the flag: the transport's writer sets sent, and
// noResend the answer's status.
func (f *sentFlag) trace(ctx context.Context) context.Context {
	ctx = context.WithValue(ctx, flagKey{}, f)
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { f.sent.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { f.sent.Store(true) },
	})
}

// noteStatus keeps the status of r's answer in r's flag, if it has one.
func noteStatus(r *http.Request, resp *http.Response) {
	if f, ok := r.Context().Value(flagKey{}).(*sentFlag); ok && resp != nil {
		f.status.Store(int32(resp.StatusCode))
	}
}

// sortError sorts what a POST's failure says, into the ports' errors:
//
//   - Stripe's own error (a *stripego.Error): by its status and type
//     (sortStripeError);
//   - no answer: "not charged" if the request was never written, unknown
//     if it was (a timeout, a reset: Stripe may have acted);
//   - an answer that is not Stripe's (a proxy's or a gateway's page):
//     unknown for a 5xx, which may come after Stripe acted; "not now" for
//     a 4xx, which stopped the request before it reached Stripe; unknown
//     for a 2xx that cannot be read.
func sortError(err error, f *sentFlag, what string) error {
	var se *stripego.Error
	if errors.As(err, &se) {
		return sortStripeError(se, what)
	}
	switch status := int(f.status.Load()); {
	case status == 0 && !f.sent.Load():
		return fmt.Errorf("%w: the %s was not sent: %w", app.ErrProviderNotCharged, what, err)
	case status == 0:
		return fmt.Errorf("%w: the %s was sent and no answer came: %w", app.ErrProviderOutcomeUnknown, what, err)
	case status >= 400 && status < 500:
		return fmt.Errorf("%w: the %s was answered %d by something other than Stripe: %w", app.ErrProviderNotCharged, what, status, err)
	default:
		return fmt.Errorf("%w: the %s was answered %d, and the answer cannot be read: %w", app.ErrProviderOutcomeUnknown, what, status, err)
	}
}

// sortStripeError sorts Stripe's error answers. A decline (402
// card_error) is a decision, which the calls read before they get here.
//
//   - idempotency_error: the key was used with other parameters. This
//     service sends one set of parameters under a key, so something was
//     made under it that this request does not describe: unknown, never a
//     refusal (the lookup finds what it is).
//   - 409 (idempotency_key_in_use, a lock): the key's first request is
//     still executing: unknown.
//   - 5xx: Stripe saves a 500 under the key once the endpoint started and
//     replays it for 24 h, so the PaymentIntent may exist: unknown until
//     the webhook or a lookup finds it.
//   - 429, 401, 403: refused before anything was done, for now (a rate
//     limit, our credentials): not now. A wrong API key must not end every
//     payment FAILED.
//   - 400 and 404 resource_missing (invalid_request_error): the request is
//     invalid to Stripe, or the state of its object does not allow it
//     (a capture of a captured PaymentIntent): refused for good.
//   - another 404 (an unrecognized URL: STRIPE_API_BASE is wrong): not now.
//   - anything else: unknown.
func sortStripeError(se *stripego.Error, what string) error {
	msg := fmt.Sprintf("Stripe answered the %s %d %s", what, se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		msg += " " + string(se.Code)
	}
	msg += ": " + se.Msg
	switch code := se.HTTPStatusCode; {
	case se.Type == stripego.ErrorTypeIdempotency:
		return fmt.Errorf("%w: %s (something was made under the key with other parameters)", app.ErrProviderOutcomeUnknown, msg)
	case code == http.StatusConflict:
		return fmt.Errorf("%w: %s", app.ErrProviderOutcomeUnknown, msg)
	case code >= 500:
		return fmt.Errorf("%w: %s", app.ErrProviderOutcomeUnknown, msg)
	case code == http.StatusTooManyRequests, code == http.StatusUnauthorized, code == http.StatusForbidden:
		return fmt.Errorf("%w: %s", app.ErrProviderNotCharged, msg)
	case code == http.StatusBadRequest, code == http.StatusNotFound && se.Code == stripego.ErrorCodeResourceMissing:
		return fmt.Errorf("%w: %s", app.ErrProviderRefused, msg)
	case code == http.StatusNotFound:
		return fmt.Errorf("%w: %s", app.ErrProviderNotCharged, msg)
	default:
		return fmt.Errorf("%w: %s", app.ErrProviderOutcomeUnknown, msg)
	}
}

// declineOf reads a POST's failure as a decline: a 402 card_error is
// Stripe's decision. A decline that names a PaymentIntent this request
// did not make (check) is not trusted: unknown. ok is false when err is
// not a decline.
func declineOf(err error, check func(*stripego.PaymentIntent) error) (decided bool, _ error) {
	var se *stripego.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusPaymentRequired || se.Type != stripego.ErrorTypeCard {
		return false, nil
	}
	if se.PaymentIntent != nil && check != nil {
		if err := check(se.PaymentIntent); err != nil {
			return true, err
		}
	}
	return true, nil
}
