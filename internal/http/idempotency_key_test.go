package http

import (
	"strings"
	"testing"
)

// The Idempotency-Key value as draft-ietf-httpapi-idempotency-key-header-07
// writes it (an RFC 8941 String) and bare, as Stripe's clients send it
// (decision 0019): a quoted value is decoded, so `"k"` and `k` are one key;
// an empty, malformed or parameterised String is refused, and the error says
// why; the length limit applies to the decoded key.
func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	for _, tc := range []struct {
		value   string
		key     string // the key, when accepted
		refusal string // part of the error, when refused
	}{
		{value: `8e03978e-40d5-43e8-bc93-6894a57f9324`, key: `8e03978e-40d5-43e8-bc93-6894a57f9324`},
		{value: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, key: `8e03978e-40d5-43e8-bc93-6894a57f9324`},
		{value: `k`, key: `k`},
		{value: `"k"`, key: `k`},
		{value: `"a b"`, key: `a b`},
		{value: `"a\"b"`, key: `a"b`},
		{value: `"a\\b"`, key: `a\b`},
		{value: `a"b`, key: `a"b`}, // bare: taken as it is
		{value: `k;x=1`, key: `k;x=1`},
		{value: long, key: long},
		{value: `"` + long + `"`, key: long}, // 257 characters of header, 255 of key
		{value: `"` + strings.Repeat(`\"`, 255) + `"`, key: strings.Repeat(`"`, 255)}, // 512 of header

		{value: `""`, refusal: "it is empty"},
		{value: `"`, refusal: "closing quote is missing"},
		{value: `"k`, refusal: "closing quote is missing"},
		{value: `"k\"`, refusal: "closing quote is missing"},
		{value: `"a\b"`, refusal: "backslash"},
		{value: `"a\`, refusal: "backslash"},
		{value: `"k"x`, refusal: "text follows the closing quote"},
		{value: `"k" `, refusal: "text follows the closing quote"},
		{value: `"k", "k"`, refusal: "text follows the closing quote"},
		{value: `"k";x=1`, refusal: "parameters"},
		{value: `"k";x`, refusal: "parameters"},
		{value: "\"a\tb\"", refusal: "not printable ASCII"},
		{value: `"ключ"`, refusal: "not printable ASCII"},
		{value: `ключ`, refusal: "not printable ASCII"},
		{value: long + "k", refusal: "longer than 255"},
		{value: `"` + long + `k"`, refusal: "longer than 255"},
	} {
		key, err := parseIdempotencyKey(tc.value)
		switch {
		case tc.refusal == "" && (err != nil || key != tc.key):
			t.Errorf("%q: key %q, %v; want %q", tc.value, key, err, tc.key)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%q: key %q, %v; want an error saying %q", tc.value, key, err, tc.refusal)
		}
	}
}
