package http_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// A body that names a field twice is refused, at any depth, naming the
// field, and stores nothing. encoding/json would keep the last value while
// a gateway, WAF or audit log may keep the first: one body, two charges.
func TestDuplicateJSONKeysAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	s := startService(t, nil)
	s.addOrder(t, 1001, 42, "100.50", "RUB")
	s.addOrder(t, 1002, 42, "2500.00", "RUB")
	rest := `"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_dup"`

	tests := []struct {
		name   string
		body   string
		fields []string
	}{
		{"the issue's body: first 1002, then 1001", `{"orderId":1002,"orderId":1001,` + rest + `}`, []string{"orderId"}},
		{"same value twice", `{"orderId":1001,"orderId":1001,` + rest + `}`, []string{"orderId"}},
		{"escaped spelling", `{"orderId":1001,"order\u0049d":1002,` + rest + `}`, []string{"orderId"}},
		{"amount twice", `{"orderId":1001,` + rest + `,"amount":"1.00"}`, []string{"amount"}},
		{"nested object", `{"orderId":1001,` + rest + `,"meta":{"a":1,"a":2}}`, []string{"meta.a"}},
		{"inside an array", `{"orderId":1001,` + rest + `,"meta":[{"a":1,"a":2}]}`, []string{"meta[0].a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.charge(t, "dup-key", tc.body)
			p := wantProblem(t, r, http.StatusBadRequest, "validation-failed")
			var named []string
			for _, e := range p.Errors {
				named = append(named, e.Field)
			}
			if !slices.Equal(named, tc.fields) {
				t.Errorf("fields named %q, want %q", named, tc.fields)
			}
			if !strings.Contains(string(r.body), "more than once") {
				t.Errorf("the problem does not say why: %s", r.body)
			}
		})
	}
	if n := s.count(t, `SELECT count(*) FROM idempotency_record`) + s.count(t, `SELECT count(*) FROM payment`); n != 0 {
		t.Fatalf("rows written for bodies with duplicate keys = %d, want 0", n)
	}
	if calls := s.providerCalls(t); calls != 0 {
		t.Fatalf("provider calls = %v, want 0", calls)
	}
	// The key stays free for the unambiguous body.
	if r := s.charge(t, "dup-key", `{"orderId":1001,`+rest+`}`); r.status != http.StatusCreated {
		t.Fatalf("the same key with a clean body: %d %s", r.status, r.body)
	}
	if n := s.count(t, `SELECT count(*) FROM payment WHERE order_id = 1001 AND external_payment_id = 'pi_dup'`); n != 1 {
		t.Fatalf("payments for order 1001 = %d, want 1", n)
	}
}
