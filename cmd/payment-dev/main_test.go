package main

import (
	"strings"
	"testing"
)

// The dev provider's webhooks go to the service's own address (a wildcard
// listener is reached on loopback), with a generated secret unless one is
// given; SANDBOX_WEBHOOK_URL set empty turns them off. Not parallel: it
// sets the environment.
func TestWebhooksFor(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		env     map[string]string
		wantURL string
		secret  string // "" means generated
	}{
		{"the dev default", "127.0.0.1:8080", nil, "http://127.0.0.1:8080/webhooks/sandbox", ""},
		{"a wildcard listener", ":9000", nil, "http://127.0.0.1:9000/webhooks/sandbox", ""},
		{"turned off", "127.0.0.1:8080", map[string]string{"SANDBOX_WEBHOOK_URL": ""}, "", ""},
		{"a URL and a secret of one's own", "127.0.0.1:8080",
			map[string]string{"SANDBOX_WEBHOOK_URL": "http://127.0.0.1:7000/hook", "SANDBOX_WEBHOOK_SECRET": "mine"}, "http://127.0.0.1:7000/hook", "mine"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"SANDBOX_WEBHOOK_URL", "SANDBOX_WEBHOOK_SECRET"} {
				if v, ok := tc.env[k]; ok {
					t.Setenv(k, v)
				}
			}
			w := webhooksFor(tc.addr)
			if w.url != tc.wantURL {
				t.Errorf("url %q, want %q", w.url, tc.wantURL)
			}
			if tc.secret != "" && w.secret != tc.secret || tc.secret == "" && (!strings.HasPrefix(w.secret, "whsec_dev_") || len(w.secret) < 30) {
				t.Errorf("secret %q", w.secret)
			}
			if other := webhooksFor(tc.addr); tc.secret == "" && other.secret == w.secret {
				t.Error("two runs share a generated secret")
			}
		})
	}
}
