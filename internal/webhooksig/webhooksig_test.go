package webhooksig

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	now := time.Unix(1767225600, 0)
	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	current, previous, other := []byte("whsec_current"), []byte("whsec_previous"), []byte("whsec_other")
	tolerance := 5 * time.Minute

	for _, tc := range []struct {
		name    string
		header  string
		body    []byte
		secrets [][]byte
		want    error
	}{
		{"signed now with the secret", Sign(now, body, current), body, [][]byte{current}, nil},
		{"signed just inside the tolerance", Sign(now.Add(-tolerance), body, current), body, [][]byte{current}, nil},
		{"a clock slightly ahead", Sign(now.Add(time.Minute), body, current), body, [][]byte{current}, nil},
		{"rotation: the receiver holds both, the sender signs with the old", Sign(now, body, previous), body, [][]byte{current, previous}, nil},
		{"rotation: the sender signs with both, the receiver holds the new", Sign(now, body, previous, current), body, [][]byte{current}, nil},
		{"a secret the receiver does not hold", Sign(now, body, other), body, [][]byte{current, previous}, ErrNoMatch},
		{"a tampered body", Sign(now, body, current), []byte(strings.Replace(string(body), "succeeded", "declined", 1)), [][]byte{current}, ErrNoMatch},
		{"a replay older than the tolerance", Sign(now.Add(-tolerance-time.Second), body, current), body, [][]byte{current}, ErrStale},
		{"signed too far in the future", Sign(now.Add(tolerance+time.Second), body, current), body, [][]byte{current}, ErrStale},
		{"a changed timestamp breaks the signature", "t=1767225601" + Sign(now, body, current)[len("t=1767225600"):], body, [][]byte{current}, ErrNoMatch},
		{"a forged stale one is a mismatch, not stale", Sign(now.Add(-time.Hour), body, other), body, [][]byte{current}, ErrNoMatch},
		{"no header", "", body, [][]byte{current}, ErrMalformed},
		{"no signature", "t=1767225600", body, [][]byte{current}, ErrMalformed},
		{"no time", "v1=" + strings.Repeat("ab", 32), body, [][]byte{current}, ErrMalformed},
		{"two times", "t=1,t=2,v1=" + strings.Repeat("ab", 32), body, [][]byte{current}, ErrMalformed},
		{"a time that is not a number", "t=soon,v1=" + strings.Repeat("ab", 32), body, [][]byte{current}, ErrMalformed},
		{"a signature that is not hex", "t=1767225600,v1=zz", body, [][]byte{current}, ErrMalformed},
		{"a signature of the wrong length", "t=1767225600,v1=abcd", body, [][]byte{current}, ErrMalformed},
		{"an item without =", "t=1767225600,v1", body, [][]byte{current}, ErrMalformed},
		{"other schemes are ignored", Sign(now, body, current) + ",v0=legacy", body, [][]byte{current}, nil},
		{"no secrets held", Sign(now, body, current), body, nil, ErrNoMatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.header, tc.body, tc.secrets, now, tolerance)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Verify(%q) = %v, want %v", tc.header, err, tc.want)
			}
		})
	}
}

func TestSignIsTheDocumentedScheme(t *testing.T) {
	// The example in the package comment, so a sender in another language
	// can check its implementation against it.
	got := Sign(time.Unix(1767225600, 0), []byte(`{}`), []byte("whsec_test"))
	const documented = "t=1767225600,v1=4a942ef9477fb7b15b98664cf7ff2c2543984c1fa6bdf3520b48dcb25bcd1fe4"
	if got != documented {
		t.Fatalf("Sign = %q, the package comment says %q", got, documented)
	}
}
