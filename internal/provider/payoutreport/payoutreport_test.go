package payoutreport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/provider/payoutreport"
	"github.com/example/payment-service/internal/provider/sandbox"
	"github.com/example/payment-service/internal/sandboxprovider"
)

// sandboxDay makes a day at the sandbox over its HTTP API: a charge, a
// charge refunded in part, an authorization captured in part, a refund
// made at the provider only, a payout of it all, and a charge after it.
func sandboxDay(t *testing.T) (*sandboxprovider.Server, *sandbox.Client) {
	t.Helper()
	s := sandboxprovider.StartForTest(t, sandboxprovider.Config{Balance: sandboxprovider.BalanceConfig{
		FeePercent: decimal.RequireFromString("2.9"), FeeFixed: decimal.RequireFromString("0.30")}})
	client, err := sandbox.New(sandbox.Config{BaseURL: s.URL, ConnectTimeout: time.Second, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, key, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
	}
	post("/v1/charges", "sandbox:pi_1", `{"amount":"100.00","currency":"RUB","reference":"pi_1"}`)
	post("/v1/charges", "sandbox:pi_2", `{"amount":"80.00","currency":"RUB","reference":"pi_2"}`)
	post("/v1/refunds", "refund:sandbox:re_2", `{"charge":"sandbox:pi_2","amount":"30.00","currency":"RUB","reference":"re_2"}`)
	post("/v1/authorizations", "sandbox:pi_3", `{"amount":"50.00","currency":"EUR","reference":"pi_3"}`)
	post("/v1/captures", "sandbox:pi_3:capture:cp_3", `{"authorization":"sandbox:pi_3","amount":"35.50","currency":"EUR","reference":"cp_3"}`)
	if _, err := s.RefundOutside("sandbox:pi_1", decimal.RequireFromString("5.00")); err != nil {
		t.Fatal(err)
	}
	s.PayOut()
	post("/v1/charges", "sandbox:pi_4", `{"amount":"10.00","currency":"RUB","reference":"pi_4"}`)
	return s, client
}

func report(t *testing.T, s *sandboxprovider.Server, from, to time.Time) string {
	t.Helper()
	q := url.Values{"created[gte]": {from.Format(time.RFC3339Nano)}, "created[lt]": {to.Format(time.RFC3339Nano)}}
	resp, err := http.Get(s.URL + "/v1/reports/payout_reconciliation.csv?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the report: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// The sandbox's report, parsed, is its balance API's books of the same
// window: the same movements with the same references, amounts, fees,
// categories and payouts, and the same payouts.
func TestTheReportIsTheBalanceAPIsBooks(t *testing.T) {
	t.Parallel()
	s, client := sandboxDay(t)
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	fromAPI, err := client.Books(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	csv := report(t, s, from, to)
	fromReport, err := payoutreport.Parse(strings.NewReader(csv), payoutreport.Options{Account: sandboxprovider.DefaultAccount})
	if err != nil {
		t.Fatalf("%v\n%s", err, csv)
	}
	if len(fromAPI.Movements) != 7 || len(fromAPI.Payouts) != 2 {
		t.Fatalf("the API's books: %d movements, %d payouts; want 7 (2 charges, a refund, a capture and its reversal, the refund outside, a charge) and 2 (RUB, EUR)",
			len(fromAPI.Movements), len(fromAPI.Payouts))
	}
	same := func(a, b app.ProviderMovement) bool {
		return a.ID == b.ID && a.Category == b.Category && a.PaymentRef == b.PaymentRef && a.RefundRef == b.RefundRef &&
			a.Gross.Equal(b.Gross) && a.Fee.Equal(b.Fee) && a.Net.Equal(b.Net) && a.Currency == b.Currency &&
			a.PayoutID == b.PayoutID && a.Created.Truncate(time.Second).Equal(b.Created)
	}
	if !slices.EqualFunc(fromAPI.Movements, fromReport.Movements, same) {
		t.Errorf("movements:\nthe API    %+v\nthe report %+v", fromAPI.Movements, fromReport.Movements)
	}
	samePayout := func(a, b app.Payout) bool {
		return a.ID == b.ID && a.Amount.Equal(b.Amount) && a.Currency == b.Currency
	}
	if !slices.EqualFunc(fromAPI.Payouts, fromReport.Payouts, samePayout) {
		t.Errorf("payouts:\nthe API    %+v\nthe report %+v", fromAPI.Payouts, fromReport.Payouts)
	}
	// Reconciled against nothing of ours, the two give the same items.
	w := app.ReconcileWindow{From: from, To: to, Now: to}
	a, b := app.Reconcile(w, app.OurBooks{}, fromAPI), app.Reconcile(w, app.OurBooks{}, fromReport)
	if !slices.EqualFunc(a.Mismatches, b.Mismatches, func(x, y app.Mismatch) bool { return x.Key == y.Key }) || len(a.Mismatches) == 0 {
		t.Errorf("the API's books give %d mismatches, the report's %d", len(a.Mismatches), len(b.Mismatches))
	}
}

// A report that cannot be read whole is refused with an error that names
// its line, and gives no books at all.
func TestABadReportIsRefusedNamingItsLine(t *testing.T) {
	t.Parallel()
	s, _ := sandboxDay(t)
	good := report(t, s, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	lines := strings.SplitAfter(good, "\n")
	// Line 2, after the header, is the first charge's row.
	row := strings.TrimSuffix(lines[1], "\n")
	with := func(old, new string) string {
		if !strings.Contains(row, old) {
			t.Fatalf("row %q has no %q", row, old)
		}
		return lines[0] + strings.Replace(row, old, new, 1) + "\n" + strings.Join(lines[2:], "")
	}
	for _, tc := range []struct {
		name, report, want string
	}{
		{"empty", "", "empty"},
		{"cut short in the middle of a row", good[:len(good)-len(lines[len(lines)-2])/2], "ends in the middle of a row"},
		{"cut short at a field's boundary", lines[0] + row[:strings.LastIndex(row, ",")] + "\n", "line 2"},
		{"a quote never closed", lines[0] + `"` + row + "\n", "line 2"},
		{"an unknown currency", with(",rub,", ",xyz,"), `line 2: unknown currency "xyz"`},
		{"a row of another account", with(sandboxprovider.DefaultAccount, "acct_other"), "line 2: the row is of account acct_other"},
		{"a net that is not gross less fee", with(",100.00,3.20,96.80,", ",100.00,3.20,96.00,"), "line 2: net"},
		{"an amount that is no number", with(",100.00,", ",1OO.00,"), `line 2: gross "1OO.00"`},
		{"an unknown category", with(",charge,", ",adjustment,"), `line 2: unknown reporting_category "adjustment"`},
		{"a transaction twice", good + row + "\n", "is on line 2 already"},
		{"a column missing", strings.Replace(good, "reporting_category", "category", 1), "line 1: no column reporting_category"},
		{"no time", with(row[strings.Index(row, ",")+1:strings.Index(row, ",")+20], "yesterday"), `line 2: created_utc "yesterday"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			books, err := payoutreport.Parse(strings.NewReader(tc.report), payoutreport.Options{Account: sandboxprovider.DefaultAccount})
			if !errors.Is(err, payoutreport.ErrReport) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
			if len(books.Movements) != 0 || len(books.Payouts) != 0 {
				t.Fatalf("a refused report gave books: %+v", books)
			}
		})
	}
}

// Whatever bytes a report holds, Parse returns books or an error naming
// a line, never both, and never panics.
func FuzzParse(f *testing.F) {
	f.Add("balance_transaction_id,created_utc,currency,gross,fee,net,reporting_category,source_id,automatic_payout_id\n" +
		"txn_1,2026-12-07 10:00:00,rub,100.00,3.20,96.80,charge,ch_1,po_1\n" +
		"po_1,2026-12-07 11:00:00,rub,-96.80,0.00,-96.80,payout,po_1,po_1\n")
	f.Add("balance_transaction_id,created_utc\n\"txn_1,2026")
	f.Fuzz(func(t *testing.T, report string) {
		books, err := payoutreport.Parse(strings.NewReader(report), payoutreport.Options{Account: "acct_1"})
		if err != nil && (len(books.Movements) > 0 || len(books.Payouts) > 0) {
			t.Fatalf("an error and books: %v", err)
		}
		if err != nil && !strings.Contains(err.Error(), "line") && !strings.Contains(err.Error(), "empty") {
			t.Fatalf("the error names no line: %v", err)
		}
	})
}
