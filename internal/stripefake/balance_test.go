package stripefake_test

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/example/payment-service/internal/stripefake"
)

// The balance the fake publishes, held to Stripe's document: a charge
// less its fee, a partial capture's reversal of what it did not take, a
// refund, a payout of their net; listed by window and by payout, each
// with its source and the source's PaymentIntent expanded.
func TestBalanceTransactionsAndPayouts(t *testing.T) {
	t.Parallel()
	f := start(t, stripefake.Config{FeeBasisPoints: 290, FeeFixed: 30})
	if r := f.call(t, "POST", "/v1/payment_intents", "k1", intent(10000, stripefake.PMVisa, "stripe:pi_1")); r.status != 200 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	charged := f.last(t)
	held := intent(5000, stripefake.PMVisa, "stripe:pi_2")
	held.Set("capture_method", "manual")
	if r := f.call(t, "POST", "/v1/payment_intents", "k2", held); r.status != 200 {
		t.Fatalf("authorization: %d %s", r.status, r.body)
	}
	if r := f.call(t, "POST", "/v1/payment_intents/"+f.last(t)+"/capture", "k3", url.Values{"amount_to_capture": {"3550"}}); r.status != 200 {
		t.Fatalf("capture: %d %s", r.status, r.body)
	}
	if r := f.call(t, "POST", "/v1/refunds", "k4", url.Values{"payment_intent": {charged}, "amount": {"4000"},
		"metadata[provider_key]": {"refund:stripe:re_1"}}); r.status != 200 {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	payouts := f.PayOut()
	if len(payouts) != 1 {
		t.Fatalf("payouts %v", payouts)
	}

	type txn struct {
		ID                string
		ReportingCategory string `json:"reporting_category"`
		Amount, Fee, Net  int64
		Source            struct {
			Object        string
			Metadata      map[string]string
			PaymentIntent struct{ Metadata map[string]string } `json:"payment_intent"`
		}
	}
	list := func(params url.Values) []txn {
		t.Helper()
		params.Add("expand[]", "data.source")
		params.Add("expand[]", "data.source.payment_intent")
		params.Set("limit", "100")
		r := f.call(t, "GET", "/v1/balance_transactions", "", params)
		var l struct{ Data []txn }
		if err := json.Unmarshal(r.body, &l); err != nil || r.status != 200 {
			t.Fatalf("list: %d %v %s", r.status, err, r.body)
		}
		return l.Data
	}
	all := list(url.Values{"created[gte]": {"0"}})
	byCategory := map[string]txn{}
	net := int64(0)
	for _, x := range all {
		byCategory[x.ReportingCategory] = x
		net += x.Net
	}
	for category, want := range map[string][3]int64{
		"partial_capture_reversal": {-1450, 0, -1450},
		"refund":                   {-4000, 0, -4000},
	} {
		got := byCategory[category]
		if got.Amount != want[0] || got.Fee != want[1] || got.Net != want[2] {
			t.Errorf("%s: %+v, want amount, fee, net %v", category, got, want)
		}
	}
	// Two charges: 100.00 less 2.9 % and 0.30 (3.20), the authorization's
	// 50.00 less 1.75 (1.45, 0.30).
	fees := map[int64]int64{}
	for _, x := range all {
		if x.ReportingCategory == "charge" {
			fees[x.Amount] = x.Fee
		}
	}
	if fees[10000] != 320 || fees[5000] != 175 {
		t.Errorf("the charges' fees %v, want 320 of 10000 and 175 of 5000", fees)
	}
	if len(all) != 4 {
		t.Fatalf("%d balance transactions, want 4: %+v", len(all), all)
	}
	if r := byCategory["refund"]; r.Source.Object != "refund" || r.Source.Metadata["provider_key"] != "refund:stripe:re_1" ||
		r.Source.PaymentIntent.Metadata["provider_key"] != "stripe:pi_1" {
		t.Errorf("the refund's source does not carry our references: %+v", r.Source)
	}
	if got := list(url.Values{"payout": {payouts[0]}}); len(got) != 4 {
		t.Errorf("the payout paid out %d transactions, want 4", len(got))
	}
	r := f.call(t, "GET", "/v1/payouts", "", url.Values{"created[gte]": {"0"}})
	var l struct{ Data []struct{ Amount int64 } }
	if err := json.Unmarshal(r.body, &l); err != nil || len(l.Data) != 1 || l.Data[0].Amount != net {
		t.Fatalf("payouts: %s, want one of %d", r.body, net)
	}
}
