package strictjson

import (
	"slices"
	"strings"
	"testing"
)

func TestDuplicateKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"none", `{"orderId":1001,"customerId":42}`, nil},
		{"top level, last one would win", `{"orderId":1002,"orderId":1001}`, []string{"orderId"}},
		{"escaped spelling of the same name", `{"orderId":1,"order\u0049d":2}`, []string{"orderId"}},
		{"case differs: not the same name", `{"orderId":1,"OrderId":2}`, nil},
		{"nested object", `{"a":{"b":1,"c":{"d":1,"d":2}}}`, []string{"a.c.d"}},
		{"object in an array", `{"items":[{"sku":1},{"sku":1,"sku":2}]}`, []string{"items[1].sku"}},
		{"top-level array", `[{"x":1,"x":1}]`, []string{"[0].x"}},
		{"same name in sibling objects is fine", `{"a":{"id":1},"b":{"id":2}}`, nil},
		{"every repeat reported", `{"a":1,"a":2,"a":3,"b":{"c":1,"c":2}}`, []string{"a", "a", "b.c"}},
		{"repeated name in a string value is data", `{"a":"\"a\":1","b":"a"}`, nil},
		{"invalid JSON is the decoder's to report", `{"a":1,"a":`, nil},
		{"scalar", `42`, nil},
		{"huge exponent stays text", `{"amount":1e-1000000000,"amount":1}`, []string{"amount"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := DuplicateKeys([]byte(tc.in)); !slices.Equal(got, tc.want) {
				t.Errorf("DuplicateKeys(%s) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// The scan is linear: a 64 KiB body (the API's limit) of nested objects
// and arrays is scanned without running out of stack or time, and deep
// nesting past encoding/json's limit is an error for the decoder, not a
// duplicate.
func TestDuplicateKeysOnHostileShapes(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	if got := DuplicateKeys([]byte(deep)); got != nil {
		t.Errorf("deep nesting: %q, want nil", got)
	}
	wide := "{" + strings.Repeat(`"k":1,`, 10000) + `"k":1}`
	if got := DuplicateKeys([]byte(wide)); len(got) != 10000 {
		t.Errorf("wide object: %d duplicates, want 10000", len(got))
	}
}

func BenchmarkDuplicateKeysChargeBody(b *testing.B) {
	body := []byte(`{"orderId":1001,"customerId":42,"amount":"100.50","currency":"RUB","paymentProvider":"sandbox","externalPaymentId":"pi_demo_1"}`)
	b.ReportAllocs()
	for b.Loop() {
		if DuplicateKeys(body) != nil {
			b.Fatal("duplicate")
		}
	}
}
