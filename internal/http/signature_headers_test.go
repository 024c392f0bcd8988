package http

import (
	"testing"

	"github.com/example/payment-service/internal/domain"
	"github.com/example/payment-service/internal/provider/stripe"
)

// The header an unsigned delivery is refused for, before any reader is
// configured, is the one each provider's reader verifies.
func TestSignatureHeadersAreTheReaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider domain.ProviderName
		reader   ProviderEventReader
	}{
		{sandboxProvider, sandboxReader{}},
		{stripeProvider, stripe.NewEventReader("whsec_signature_headers_test")},
	}
	for _, tc := range tests {
		if got, want := signatureHeaders[tc.provider], tc.reader.SignatureHeader(); got != want {
			t.Errorf("%s: deliveries are refused unsigned for a missing %q, its reader reads %q", tc.provider, got, want)
		}
	}
}
