package http

import (
	"errors"
	"net/http"
	"strings"
)

// headerIdempotencyKey is the request header every money command carries
// (R-DIST-IDEM-3).
const headerIdempotencyKey = "Idempotency-Key"

// maxIdempotencyKeyLength bounds the key as stored: the decoded key, not the
// header's text, so `"k"` and `k` are held to the same limit.
const maxIdempotencyKeyLength = 255

// idempotencyKey reads the Idempotency-Key header of a money command, or
// returns the 400 problem that names it. Every handler that takes a key
// (POST /payments, and each command after it) calls this, so they all
// accept the same keys and refuse the rest with the same answers.
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values(headerIdempotencyKey)
	if len(values) == 0 || values[0] == "" {
		return "", newProblem(http.StatusBadRequest, codeIdempotencyKeyMissing, "Idempotency key missing",
			"Send an Idempotency-Key header, generated once per operation and reused on every retry.")
	}
	if len(values) > 1 {
		return "", invalidIdempotencyKey(errors.New("it appears more than once"))
	}
	key, err := parseIdempotencyKey(values[0])
	if err != nil {
		return "", invalidIdempotencyKey(err)
	}
	return key, nil
}

func invalidIdempotencyKey(why error) *Problem {
	return newProblem(http.StatusBadRequest, codeIdempotencyKeyInvalid, "Idempotency key invalid",
		"The Idempotency-Key header is invalid: "+why.Error()+". Send it once, as a quoted string "+
			`("8e03978e-...") or bare (8e03978e-...), holding 1 to 255 printable ASCII characters.`)
}

// parseIdempotencyKey turns one Idempotency-Key field value (as net/http
// hands it over: leading and trailing whitespace already gone) into the key.
//
// The IETF draft (draft-ietf-httpapi-idempotency-key-header-07, section 2.1)
// makes the value an RFC 8941 Item whose bare item is a String. A value
// that starts with a double quote is parsed as one (RFC 8941 section 4.2.5),
// and the key is the decoded String, so `"k"` and `k` are one key. A value
// that does not start with a quote is taken as it is: the draft does not
// allow that, but Stripe's clients and pkg/paymentclient send it (decision
// 0019).
//
// Parameters after the String (`"k";x=1`) are refused: the draft defines
// none, so a sender that adds one means something this service would
// silently drop, and two values that differ only in a parameter would name
// one key (decision 0019).
func parseIdempotencyKey(value string) (string, error) {
	var key string
	if strings.HasPrefix(value, `"`) {
		s, rest, err := parseSFString(value)
		if err != nil {
			return "", err
		}
		switch {
		case strings.HasPrefix(rest, ";"):
			return "", errors.New("parameters after the string (;name=value) are not supported")
		case rest != "":
			return "", errors.New("text follows the closing quote")
		}
		key = s
	} else {
		key = value
	}
	if key == "" {
		return "", errors.New("it is empty")
	}
	if len(key) > maxIdempotencyKeyLength {
		return "", errors.New("it is longer than 255 characters")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", errors.New("it holds a character that is not printable ASCII")
		}
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string at the start of s, which must
// be a double quote, and returns the decoded string and what follows it:
//
//	sf-string = DQUOTE *chr DQUOTE
//	chr       = unescaped / escaped
//	unescaped = %x20-21 / %x23-5B / %x5D-7E
//	escaped   = "\" ( DQUOTE / "\" )
func parseSFString(s string) (decoded, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) || s[i+1] != '"' && s[i+1] != '\\' {
				return "", "", errors.New(`a backslash escapes something other than " or \`)
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), s[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", errors.New("the string holds a character that is not printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("the closing quote is missing")
}
