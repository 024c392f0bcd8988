package healthcheck_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/example/payment-service/internal/healthcheck"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		addr, path string
		ok         bool
	}{
		{":" + port, "/ok", true}, // the listen address form, as in HTTP_ADDR
		{"0.0.0.0:" + port, "/ok", true},
		{":" + port, "/not-ready", false},
		{dead, "/ok", false},
		{"no-port", "/ok", false},
	} {
		if err := healthcheck.Probe(context.Background(), tc.addr, tc.path); (err == nil) != tc.ok {
			t.Errorf("Probe(%q, %q) = %v, want ok = %v", tc.addr, tc.path, err, tc.ok)
		}
	}
}
