// Package webhooksig signs webhook deliveries and verifies their
// signatures: the scheme the sandbox provider sends with and
// payment-service checks, written once so the two cannot drift.
//
// The scheme is the one the big providers use. The sender puts one header
// on each delivery; for the body {} signed at 1767225600 with the secret
// whsec_test it is
//
//	Sandbox-Signature: t=1767225600,v1=4a942ef9477fb7b15b98664cf7ff2c2543984c1fa6bdf3520b48dcb25bcd1fe4
//
// where t is the Unix time of signing and v1 is the hex HMAC-SHA256, keyed
// with a shared secret, of the string "<t>.<raw body>". Signing the time
// with the body is what lets a receiver refuse an old delivery replayed by
// someone who recorded it: the time cannot be changed without the secret.
//
// A header may carry several v1 values (a sender rotating its secret signs
// with both), and a receiver may hold several secrets (the new one and the
// old one while it is being rotated): a delivery is genuine when any of its
// signatures matches any of the receiver's secrets.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header is the HTTP header that carries the signature.
const Header = "Sandbox-Signature"

// Verification errors. A receiver logs which one it was, and tells the
// sender no more than that the delivery was refused (see Verify).
var (
	// ErrMalformed: no header, or not of the form t=<unix>,v1=<hex>.
	ErrMalformed = errors.New("webhook signature header is malformed")
	// ErrNoMatch: no signature matches any secret (forged, tampered with,
	// or signed with a secret the receiver does not hold).
	ErrNoMatch = errors.New("webhook signature does not match")
	// ErrStale: genuine, but signed outside the tolerance (a replay, or a
	// clock far off).
	ErrStale = errors.New("webhook signature timestamp is outside the tolerance")
)

// Sign returns the header value for body, signed at t with each secret
// (one v1 per secret, in order).
func Sign(t time.Time, body []byte, secrets ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

// Verify checks header against body with the secrets a receiver holds, at
// now, allowing tolerance between the signing time and now either way.
// It checks the signature before the time, so that ErrStale is only ever
// said of a genuine delivery. Comparisons are constant-time.
func Verify(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parse(header)
	if err != nil {
		return err
	}
	matched := false
	for _, s := range secrets {
		want := mac(s, ts, body)
		for _, sig := range sigs {
			// Every pair is compared, even after a match, so the time
			// taken says nothing about which secret matched.
			if hmac.Equal(want, sig) {
				matched = true
			}
		}
	}
	if !matched {
		return ErrNoMatch
	}
	unix, _ := strconv.ParseInt(ts, 10, 64) // parse checked it
	signed := time.Unix(unix, 0)
	if d := now.Sub(signed); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

// parse splits "t=<unix>,v1=<hex>[,v1=<hex>...]" into the time as sent
// (the string is what was signed) and the decoded signatures. Elements of
// other schemes (v0=, a future v2=) are ignored, as senders may add them.
func parse(header string) (ts string, sigs [][]byte, err error) {
	for item := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return "", nil, ErrMalformed
		}
		switch k {
		case "t":
			if ts != "" {
				return "", nil, ErrMalformed
			}
			if _, err := strconv.ParseInt(v, 10, 64); err != nil || v == "" {
				return "", nil, ErrMalformed
			}
			ts = v
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return "", nil, ErrMalformed
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return "", nil, ErrMalformed
	}
	return ts, sigs, nil
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
