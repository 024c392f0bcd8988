package http_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

var describedBy = regexp.MustCompile(`^<([^>]+)>; rel="describedby"; type="text/html"$`)

// Every problem links to documentation the service serves (draft-ietf-
// httpapi-idempotency-key-header-07, section 2.7): a Link rel="describedby"
// to its code's entry on /problems, which a GET on the running service
// finds. The idempotency errors first, then a stored answer replayed and
// problems of other kinds.
func TestEveryProblemLinksToItsEntry(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 4001, 42, "10.00", "RUB")
	s.addOrder(t, 4002, 42, "20.00", "RUB")
	s.addOrder(t, 4003, 42, "30.00", "RUB")
	charge := func(key, body string) func() response {
		return func() response { return s.charge(t, key, body) }
	}
	for _, tc := range []struct {
		name   string
		send   func() response
		status int
		code   string
	}{
		{"missing key", func() response {
			return s.request(t, http.MethodPost, "/payments", chargeBody(4001, 42, "10.00", "RUB", "pi_a"), nil)
		}, 400, "idempotency-key-missing"},
		{"invalid key", charge(`""`, chargeBody(4001, 42, "10.00", "RUB", "pi_a")), 400, "idempotency-key-invalid"},
		{"outcome unknown", charge("k-1", chargeBody(4001, 42, "10.00", "RUB", "drop_a")), 503, "outcome-unknown"},
		{"request in progress", charge("k-2", chargeBody(4001, 42, "10.00", "RUB", "pi_b")), 409, "request-in-progress"},
		{"charged", charge("k-3", chargeBody(4002, 42, "20.00", "RUB", "pi_c")), 201, ""},
		{"key reused", charge("k-3", chargeBody(4003, 42, "30.00", "RUB", "pi_d")), 409, "idempotency-key-reused"},
		{"declined", charge("k-4", chargeBody(4003, 42, "30.00", "RUB", "decline_e")), 402, "payment-declined"},
		{"declined, replayed", charge("k-4", chargeBody(4003, 42, "30.00", "RUB", "decline_e")), 402, "payment-declined"},
		{"unauthorized", func() response {
			return s.request(t, http.MethodGet, "/payments/1", "", map[string]string{"Authorization": ""})
		}, 401, "unauthorized"},
		{"not found", func() response { return s.request(t, http.MethodGet, "/nope", "", nil) }, 404, "not-found"},
	} {
		r := tc.send()
		if r.status != tc.status {
			t.Fatalf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
		}
		if tc.code == "" {
			continue
		}
		link := r.header.Get("Link")
		m := describedBy.FindStringSubmatch(link)
		if m == nil {
			t.Errorf("%s: Link %q, want <...>; rel=\"describedby\"; type=\"text/html\"", tc.name, link)
			continue
		}
		target, err := url.Parse(s.url + "/payments")
		if err == nil {
			target, err = target.Parse(m[1])
		}
		if err != nil {
			t.Fatal(err)
		}
		if target.Fragment != tc.code {
			t.Errorf("%s: Link %q, want it to point at #%s", tc.name, link, tc.code)
		}
		target.Fragment = ""
		page := s.request(t, http.MethodGet, target.RequestURI(), "", map[string]string{"Authorization": ""})
		if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") ||
			!strings.Contains(string(page.body), `id="`+tc.code+`"`) {
			t.Errorf("%s: GET %s: %d %s, want 200 text/html with the entry id=%q", tc.name, target, page.status, page.header.Get("Content-Type"), tc.code)
		}
	}
}

// The problem page has an entry for every code the contract lists, and
// the entry of the key's lifetime (draft section 2.5.2's published expiry).
func TestProblemPageHasAnEntryPerCode(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := startService(t, nil)
	page := s.request(t, http.MethodGet, "/problems", "", map[string]string{"Authorization": ""})
	if page.status != http.StatusOK {
		t.Fatalf("GET /problems: %d", page.status)
	}
	if csp := page.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET /problems: Content-Security-Policy %q", csp)
	}
	codes := doc.Components.Schemas["Problem"].Value.Properties["code"].Value.Enum
	if len(codes) == 0 {
		t.Fatal("no codes in the spec's Problem schema")
	}
	for _, code := range append(codes, "expiry") {
		if !strings.Contains(string(page.body), `id="`+code.(string)+`"`) {
			t.Errorf("GET /problems has no entry id=%q", code)
		}
	}
}
