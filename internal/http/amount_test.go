package http

import (
	"strings"
	"testing"
)

// The amounts an attacker would send to burn CPU: long fraction or integer
// parts (a decimal's digit checks grow with the square of its length) and
// texts the validator must refuse however long they are.
var hostileAmounts = map[string]string{
	"10,001 characters, 1 in the last place": "0." + strings.Repeat("0", 9998) + "1",
	"64 KiB of integer digits":               strings.Repeat("9", 64<<10),
	"long run of trailing zeros":             "1." + strings.Repeat("0", 20000),
}

// The validator bounds its work by the text before any decimal arithmetic:
// the worst amount is refused with a constant, tiny amount of work. The
// measure is allocations, which the big-number work makes (one or more per
// digit checked); wall time is what BenchmarkValidAmountWorstCase shows.
// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestValidAmountWorkIsBounded(t *testing.T) {
	for name, amount := range hostileAmounts {
		if validAmount(amount) {
			t.Errorf("%s: accepted", name)
		}
		if allocs := testing.AllocsPerRun(5, func() { validAmount(amount) }); allocs > 2 {
			t.Errorf("%s: %v allocations per check, want at most 2", name, allocs)
		}
	}
}

func TestValidAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		amount string
		valid  bool
	}{
		{"100.50", true},
		{"100.5", true},
		{"0.0001", true},
		{"999999999999999.9999", true},
		{"1", true},
		{"100.500", true},
		{"0", false},
		{"0.00", false},
		{"1000000000000000", false}, // 16 integer digits
		{"0000000000000001", false}, // 16 digits, even as leading zeros
		{"1.00001", false},
		{"1.00000", false}, // five fraction digits, as the spec's pattern says
		{".5", false},
		{"5.", false},
		{"1.2.3", false},
		{"1e2", false},
		{"-1", false},
		{"+1", false},
		{" 1", false},
		{"", false},
	}
	for _, tc := range tests {
		if got := validAmount(tc.amount); got != tc.valid {
			t.Errorf("validAmount(%q) = %v, want %v", tc.amount, got, tc.valid)
		}
	}
}

func BenchmarkValidAmountWorstCase(b *testing.B) {
	for name, amount := range hostileAmounts {
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				validAmount(amount)
			}
		})
	}
	b.Run("valid", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			validAmount("123456789012345.1234")
		}
	})
}
