package provider

import (
	"net"
	"net/http"
	"time"
)

// NewTransport is the connection pool of one provider adapter: connecting
// (and a TLS handshake) bounded by connectTimeout, so a call that could not
// connect is known to have sent nothing, and idle connections kept for the
// next call. The adapter makes sure a request on it is sent once (the
// sandbox's newRequest, Stripe's noResend).
func NewTransport(connectTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: connectTimeout,
		MaxIdleConns:        100,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}
