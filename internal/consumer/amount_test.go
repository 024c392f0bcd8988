package consumer

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Amounts that cost a decimal parser time out of all proportion to their
// size: a tiny exponent is a number with ten thousand fraction digits to
// check, and a long text is digits to check one by one.
var hostileAmounts = map[string]string{
	"1e-10000, 8 bytes":            `1e-10000`,
	"1e10000":                      `1e10000`,
	"1E-9999 as a string":          `"1E-9999"`,
	"10,001 digits":                `0.` + strings.Repeat("0", 9998) + `1`,
	"exponent past the decoder's":  `1e-1000000000`,
	"long run of trailing zeros":   `1.` + strings.Repeat("0", 20000),
	"many digits, small exponent":  strings.Repeat("9", 5000) + `e-5000`,
	"two-digit exponent, too long": `1` + strings.Repeat("0", 60) + `e-60`,
}

func eventWithAmount(amount string) []byte {
	return []byte(`{"eventId":"0193a3c8-7a4e-7cc1-8a1e-3f0e2b6c9d01","eventType":"OrderCreated.v1","orderId":1001,"customerId":42,"amount":` +
		amount + `,"currency":"RUB","occurredAt":"2026-11-29T10:00:00Z"}`)
}

// Decoding an event whose amount is hostile does no more work than decoding
// a valid one: the amount's text is bounded (length, exponent digits) before
// any decimal arithmetic. Unbounded, a batch of 500 such events stalls the
// consumer for about a minute (110 ms each). The measure is allocations,
// which the big-number work makes per digit; BenchmarkDecodeHostileAmount
// shows the time.
//
// Not parallel: AllocsPerRun counts the whole process's allocations.
func TestDecodeHostileAmountWorkIsBounded(t *testing.T) {
	d := decoder{defaultCurrency: "RUB", maxSkew: time.Minute, now: time.Now}
	valid := eventWithAmount(`123456789012345.1234`)
	if _, err := d.decode(valid); err != nil {
		t.Fatal(err)
	}
	baseline := testing.AllocsPerRun(5, func() { _, _ = d.decode(valid) })
	for name, amount := range hostileAmounts {
		value := eventWithAmount(amount)
		_, err := d.decode(value)
		var pe *PoisonError
		if !errors.As(err, &pe) || pe.Reason != ReasonInvalidAmount {
			t.Errorf("%s: err = %v, want poison %s", name, err, ReasonInvalidAmount)
		}
		if allocs := testing.AllocsPerRun(5, func() { _, _ = d.decode(value) }); allocs > baseline+10 {
			t.Errorf("%s: %v allocations per decode, want at most %v (a valid event's, plus the error)", name, allocs, baseline+10)
		}
	}
}

func BenchmarkDecodeHostileAmount(b *testing.B) {
	d := decoder{defaultCurrency: "RUB", maxSkew: time.Minute, now: time.Now}
	run := func(name, amount string) {
		value := eventWithAmount(amount)
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = d.decode(value)
			}
		})
	}
	for name, amount := range hostileAmounts {
		run(name, amount)
	}
	run("valid", `123456789012345.1234`)
}
