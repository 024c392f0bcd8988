package consumer

import (
	"strings"
	"testing"
	"time"

	"github.com/example/payment-service/internal/asyncapitest"
)

// clocklessDecoder decodes as the consumer does, by a clock that no date an
// event can carry is ahead of: the contract (api/asyncapi.yaml) has no
// clock, so it cannot say what the allowed skew refuses.
var clocklessDecoder = decoder{
	defaultCurrency: "RUB",
	maxSkew:         48 * time.Hour,
	now:             func() time.Time { return time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC) },
}

// contractAccepts reports whether the contract takes value as an
// OrderCreated.v1 of order.events.
func contractAccepts(value []byte) bool {
	return asyncapitest.Check("order.events", []byte("1001"), nil, value) == nil
}

// orderEventCorpus is a valid event with each member in turn absent or
// replaced by one of many values, valid and not, and values of other
// shapes: what a schema could get wrong about the decoder.
func orderEventCorpus() [][]byte {
	base := []struct{ name, value string }{
		{"eventId", `"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13"`},
		{"sagaId", `"019ad4c1-0000-7000-8000-000000000001"`},
		{"eventType", `"OrderCreated.v1"`},
		{"orderId", `1001`},
		{"customerId", `42`},
		{"amount", `"100.50"`},
		{"currency", `"RUB"`},
		{"occurredAt", `"2026-11-30T10:00:00Z"`},
	}
	ids := []string{`0`, `-1`, `1`, `1.0`, `1e3`, `1E+3`, `"1"`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `1.5`, `true`, `[]`, `{}`}
	uuids := []string{`""`, `7`, `"not-a-uuid"`, `"00000000-0000-0000-0000-000000000000"`, `"019AD4C2-5F0E-7C3A-9B1D-2E4F6A8C0B13"`,
		`"{019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13}"`, `"urn:uuid:019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b13"`, `"019ad4c25f0e7c3a9b1d2e4f6a8c0b13"`,
		`"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b1"`, `"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b133"`, `"019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b1g"`, `" 019ad4c2-5f0e-7c3a-9b1d-2e4f6a8c0b1"`,
		`"019ad4c2_5f0e_7c3a_9b1d_2e4f6a8c0b13"`}
	candidates := map[string][]string{
		"eventId":    uuids,
		"sagaId":     uuids,
		"eventType":  {`"OrderCreated.v2"`, `"ordercreated.v1"`, `"OrderCreated.v1 "`, `1`, `""`},
		"orderId":    ids,
		"customerId": ids,
		"amount": {
			`1`, `0`, `-1`, `-0`, `100.50`, `100.5`, `1E+3`, `1e3`, `1E3`, `1e+14`, `1E+15`, `1e15`, `999999999999999.9999`, `999999999999999.99999`,
			`1000000000000000`, `0.0001`, `0.00001`, `1.23456`, `1.2345`, `1e-4`, `10000e-4`, `1E+001`, `1E-0`, `0.5e1`, `12345678901234.5e1`,
			`1.` + strings.Repeat("0", 36), `1.` + strings.Repeat("0", 37), `1.` + strings.Repeat("0", 38), `9.` + strings.Repeat("9", 4) + strings.Repeat("0", 33),
			`999999999999999.` + strings.Repeat("9", 4) + strings.Repeat("0", 19), `999999999999999.` + strings.Repeat("9", 4) + strings.Repeat("0", 20),
			`"1"`, `"0"`, `"0.0"`, `"00.10"`, `"-1"`, `"1."`, `".5"`, `"1e3"`, `"1E+3"`, `" 1"`, `"1 "`, `"1,5"`, `"１"`, `"100.50"`, `"100.5000"`,
			`"0000000000000001"`, `"123456789012345"`, `"1234567890123456"`, `"123456789012345.1234"`, `"123456789012345.12345"`,
			`"1.` + strings.Repeat("0", 37) + `"`, `"1.` + strings.Repeat("0", 38) + `"`, `"999999999999999.9999` + strings.Repeat("0", 19) + `"`,
			`"999999999999999.9999` + strings.Repeat("0", 20) + `"`, `"0.` + strings.Repeat("0", 37) + `1"`, `"NaN"`, `"Infinity"`, `"0x10"`,
			`{"v":1}`, `[1]`, `true`, `""`,
		},
		"currency": {`"rub"`, `"XX"`, `"XXXX"`, `1`, `"R1B"`, `""`, `"EUR"`, `"ÄÖÜ"`},
		"occurredAt": {
			`"2026-11-30T10:00:00.123456789+03:00"`, `"2026-11-30t10:00:00z"`, `"2026-11-30T10:00:00z"`, `"2026-11-30T10:00:00"`, `"2026-11-30 10:00:00Z"`,
			`"2026-11-30T10:00:60Z"`, `"2016-12-31T23:59:60Z"`, `"2026-02-29T10:00:00Z"`, `"2024-02-29T10:00:00Z"`, `"2026-04-31T10:00:00Z"`,
			`"2026-11-30T10:00:00.1234567891Z"`, `"2026-11-30T10:00:00,5Z"`, `"2026-11-30T24:00:00Z"`, `"2026-11-30T10:00:00+24:00"`,
			`"2026-11-30T10:00:00+01:60"`, `"2026-11-30T10:00:00+0100"`, `"2026-11-30T10:00Z"`, `"2026-11-30"`, `"2000-01-01T00:00:00Z"`,
			`"2000-01-01T00:30:00+01:00"`, `"2001-01-01T00:00:00+14:00"`, `"2001-01-01T00:00:00+23:59"`, `"1999-12-31T23:59:59Z"`,
			`"0001-01-01T00:00:00Z"`, `"1970-01-01T00:00:00Z"`, `"9999-12-31T23:59:59-23:59"`, `"2026-1-30T10:00:00Z"`, `"+2026-11-30T10:00:00Z"`,
			`1700000000`, `""`,
		},
	}
	render := func(replace string, with string) []byte {
		var b strings.Builder
		b.WriteByte('{')
		first := true
		for _, f := range base {
			v := f.value
			if f.name == replace {
				if with == "" {
					continue
				}
				v = with
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.WriteString(`"` + f.name + `":` + v)
		}
		b.WriteByte('}')
		return []byte(b.String())
	}
	corpus := [][]byte{render("", "")}
	for _, f := range base {
		corpus = append(corpus, render(f.name, ""), render(f.name, "null"))
		for _, c := range candidates[f.name] {
			corpus = append(corpus, render(f.name, c))
		}
	}
	for _, amount := range hostileAmounts {
		corpus = append(corpus, render("amount", amount))
	}
	valid := string(render("", ""))
	for _, v := range []string{
		valid[:len(valid)-1] + `,"channel":"web"}`,
		valid[:len(valid)-1] + `,"OrderId":7,"AMOUNT":"x"}`,
		valid[:len(valid)-1] + `,"orderId":1002}`,
		valid[:len(valid)-1] + `,"meta":{"a":1,"a":1}}`,
		valid + ` {}`, valid + `x`, "\ufeff" + valid, ` ` + valid + "\n",
		`[` + valid + `]`, `null`, `"x"`, `{}`, ``, `1`,
		strings.Replace(valid, `"RUB"`, "\"RU\xff\"", 1),
		strings.Replace(valid, `"OrderCreated.v1"`, `"Order\u0043reated.v1"`, 1),
	} {
		corpus = append(corpus, []byte(v))
	}
	return corpus
}

// The contract is no looser than the order consumer: every value it takes
// as an OrderCreated.v1, the decoder applies (by a clock no date is ahead
// of, since the contract has none). A value the contract refuses may still
// decode; the contract promises less than the consumer takes, where saying
// exactly what it takes would be beyond JSON Schema (a JSON number's text)
// or of no use to a producer. The corpus must hold values of both kinds, or
// the test proves nothing.
func TestContractIsNoLooserThanTheDecoder(t *testing.T) {
	t.Parallel()
	accepted, refused := 0, 0
	for _, value := range orderEventCorpus() {
		_, err := clocklessDecoder.decode(value)
		switch ok := contractAccepts(value); {
		case ok && err != nil:
			t.Errorf("the contract takes %s, which the consumer refuses: %v", value, err)
		case ok:
			accepted++
		default:
			refused++
		}
	}
	if accepted < 40 || refused < 100 {
		t.Errorf("the contract took %d values and refused %d; want at least 40 and 100", accepted, refused)
	}
}

// FuzzContractAcceptsOnlyWhatTheDecoderAccepts looks for a value the
// contract takes as an OrderCreated.v1 and the consumer refuses. Without
// -fuzz it runs over the corpus of TestContractIsNoLooserThanTheDecoder.
func FuzzContractAcceptsOnlyWhatTheDecoderAccepts(f *testing.F) {
	for _, value := range orderEventCorpus() {
		f.Add(value)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		if !contractAccepts(value) {
			return
		}
		if _, err := clocklessDecoder.decode(value); err != nil {
			t.Fatalf("the contract takes %q, which the consumer refuses: %v", value, err)
		}
	})
}
