package http_test

import (
	"bytes"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// GET /openapi.yaml and GET /asyncapi.yaml serve the contracts the binary
// was built with, byte for byte, and GET /docs a page whose every script,
// style and icon comes from the service itself: no key needed, nothing from
// a CDN.
func TestDocsServeTheEmbeddedSpecAndLocalAssets(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	noKey := map[string]string{"Authorization": ""}

	for _, name := range []string{"openapi.yaml", "asyncapi.yaml"} {
		spec := s.request(t, http.MethodGet, "/"+name, "", noKey)
		want, err := os.ReadFile("../../api/" + name) //nolint:gosec // G304: the repository's own API specs
		if err != nil {
			t.Fatal(err)
		}
		if spec.status != http.StatusOK || !bytes.Equal(spec.body, want) || spec.header.Get("Content-Type") != "application/yaml" ||
			spec.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET /%s: %d %s, %d bytes; want 200 application/yaml (nosniff) with api/%s's %d bytes",
				name, spec.status, spec.header.Get("Content-Type"), len(spec.body), name, len(want))
		}
	}

	page := s.request(t, http.MethodGet, "/docs", "", noKey)
	if page.status != http.StatusOK || !bytes.Contains(page.body, []byte("swagger-ui")) {
		t.Fatalf("GET /docs: %d %s", page.status, page.body)
	}
	// The page takes a secret (the API key typed under Authorize): the
	// headers a scanner expects of such a page. That the policy still
	// lets the page work is TestDocsPageInABrowserChargesAnOrder's part.
	for header, want := range map[string][]string{
		"Content-Security-Policy": {"default-src 'none'", "script-src 'self' 'sha256-", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"},
		"X-Frame-Options":         {"DENY"},
		"X-Content-Type-Options":  {"nosniff"},
		"Referrer-Policy":         {"no-referrer"},
		"Cache-Control":           {"no-store"},
	} {
		got := page.header.Get(header)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("GET /docs: %s %q, want it to hold %q", header, got, w)
			}
		}
		if strings.Contains(got, "unsafe-") {
			t.Errorf("GET /docs: %s %q allows an unsafe source", header, got)
		}
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page.body), -1)
	if len(refs) < 4 {
		t.Fatalf("the page references %d assets, want the bundle, the preset, the stylesheet and icons", len(refs))
	}
	for _, ref := range refs {
		if !strings.HasPrefix(ref[1], "/docs/") {
			t.Fatalf("asset %q is not served by the service under /docs/ (a CDN?)", ref[1])
		}
		asset := s.request(t, http.MethodGet, ref[1], "", noKey)
		if asset.status != http.StatusOK || len(asset.body) == 0 {
			t.Errorf("asset %s: %d, %d bytes", ref[1], asset.status, len(asset.body))
		}
	}
}
