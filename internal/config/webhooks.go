package config

import (
	"log/slog"
	"time"
)

// Webhooks configures POST /webhooks/sandbox, where the sandbox provider
// delivers its signed events (decision 0021).
type Webhooks struct {
	// Secrets (WEBHOOK_SECRETS: one secret, or two separated by a comma
	// while a secret is rotated) verify each delivery's signature. None:
	// the endpoint answers 503, so a provider that sends anyway retries
	// rather than losing its events.
	Secrets []Secret
	// Tolerance (WEBHOOK_TOLERANCE, default 5m) is how far a delivery's
	// signing time may be from now; older is refused as a replay.
	Tolerance time.Duration
}

// Secret is a shared secret. It prints, logs and marshals as
// "[redacted]", so that no log line, error or status page can carry it by
// accident; Bytes is the one way to the value.
type Secret struct{ value []byte }

// Bytes is the secret itself.
func (s Secret) Bytes() []byte { return s.value }

// String implements fmt.Stringer.
func (Secret) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer (%#v).
func (Secret) GoString() string { return "[redacted]" }

// LogValue implements slog.LogValuer.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalText implements encoding.TextMarshaler (JSON included).
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// minSecretLength is the shortest secret taken: an HMAC key much shorter
// than its 32-byte output can be guessed.
const minSecretLength = 16

// webhooks reads the webhook variables. Messages name a secret by its
// position, never by its value.
func (p *parser) webhooks() Webhooks {
	w := Webhooks{Tolerance: p.duration("WEBHOOK_TOLERANCE", 5*time.Minute, 10*time.Second, time.Hour)}
	secrets := p.list("WEBHOOK_SECRETS")
	if len(secrets) > 2 {
		p.fail("WEBHOOK_SECRETS", "takes one secret, or two while rotating; got %d", len(secrets))
		return w
	}
	for i, s := range secrets {
		if len(s) < minSecretLength {
			p.fail("WEBHOOK_SECRETS", "secret %d is shorter than %d characters", i+1, minSecretLength)
			continue
		}
		w.Secrets = append(w.Secrets, Secret{value: []byte(s)})
	}
	return w
}
