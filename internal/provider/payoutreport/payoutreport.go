// Package payoutreport reads a provider's itemized payout reconciliation
// report, the CSV Stripe's Dashboard and Reporting API give (and the
// sandbox's GET /v1/reports/payout_reconciliation.csv), into the
// provider's side of reconciliation (app.ProviderBooks): so a team can
// feed a downloaded report to `payment-service reconcile -report`.
//
// The columns it reads, by name, in any order, others ignored:
//
//	balance_transaction_id, created_utc, currency, gross, fee, net,
//	reporting_category, source_id, automatic_payout_id, and
//	payment_metadata[provider_key] and refund_metadata[provider_key]
//	(the references the service sends), connected_account_id if present
//
// A payout is a row of reporting_category payout (its gross is minus the
// amount paid out), as Stripe's balance reports show one. Amounts are in
// major units, as the reports write them.
//
// Parse reads the whole report before it returns anything: a report with
// one bad row gives an error that names its line, and no books, so nothing
// of it is kept. A report cut short in the middle of a row is refused (a
// row without all its fields, or no newline after the last one); one cut
// exactly between rows cannot be told from a shorter report by its form,
// and the payouts' rows then do not add up (batch_unbalanced).
package payoutreport

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
)

// Options say whose report it is.
type Options struct {
	// Account is the account the report must be of: a row whose
	// connected_account_id names another is refused. Empty takes any.
	Account string
}

// ErrReport is the error of a report that cannot be read; the message
// names the line.
var ErrReport = errors.New("payout reconciliation report")

// required are the columns a report must have.
var required = []string{"balance_transaction_id", "created_utc", "currency", "gross", "fee", "net",
	"reporting_category", "source_id", "automatic_payout_id"}

const (
	colPaymentKey = "payment_metadata[provider_key]"
	colRefundKey  = "refund_metadata[provider_key]"
	colAccount    = "connected_account_id"
	categoryPay   = "payout"
)

// categories are the reporting categories a row may have.
var categories = map[string]bool{
	string(app.CategoryCharge): true, string(app.CategoryRefund): true, string(app.CategoryRefundFailure): true,
	string(app.CategoryPartialCaptureReversal): true, string(app.CategoryDispute): true, categoryPay: true,
}

// timeLayouts are how the reports write created_utc.
var timeLayouts = []string{"2006-01-02 15:04:05", time.RFC3339Nano}

// maxReport bounds what Parse reads: a month of a million charges a day
// is about 6 GB; a team feeds one day, or one payout, at a time.
const maxReport = 2 << 30

// Parse reads a whole report.
func Parse(r io.Reader, o Options) (app.ProviderBooks, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxReport+1))
	if err != nil {
		return app.ProviderBooks{}, fmt.Errorf("%w: reading it: %w", ErrReport, err)
	}
	if len(raw) > maxReport {
		return app.ProviderBooks{}, fmt.Errorf("%w: larger than %d bytes", ErrReport, maxReport)
	}
	if len(raw) == 0 {
		return app.ProviderBooks{}, fmt.Errorf("%w: empty", ErrReport)
	}
	if raw[len(raw)-1] != '\n' {
		lines := bytes.Count(raw, []byte{'\n'}) + 1
		return app.ProviderBooks{}, fmt.Errorf("%w: line %d: the report ends in the middle of a row (cut short?)", ErrReport, lines)
	}
	cr := csv.NewReader(bytes.NewReader(raw))
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return app.ProviderBooks{}, fmt.Errorf("%w: line 1: %w", ErrReport, err)
	}
	col := map[string]int{}
	for i, name := range header {
		col[strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))] = i
	}
	for _, name := range required {
		if _, ok := col[name]; !ok {
			return app.ProviderBooks{}, fmt.Errorf("%w: line 1: no column %s", ErrReport, name)
		}
	}
	p := parser{col: col, account: o.Account, seen: map[string]int{}}
	var books app.ProviderBooks
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return app.ProviderBooks{}, fmt.Errorf("%w: %w", ErrReport, err) // csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		if err := p.row(rec, line, &books); err != nil {
			return app.ProviderBooks{}, fmt.Errorf("%w: line %d: %w", ErrReport, line, err)
		}
	}
	return books, nil
}

type parser struct {
	col     map[string]int
	account string
	seen    map[string]int // id -> its line
}

var currencies = validator.New()

func (p *parser) get(rec []string, name string) string {
	i, ok := p.col[name]
	if !ok || i >= len(rec) {
		return ""
	}
	return strings.TrimSpace(rec[i])
}

// row adds one row to books.
func (p *parser) row(rec []string, line int, books *app.ProviderBooks) error {
	id := p.get(rec, "balance_transaction_id")
	if id == "" {
		return errors.New("no balance_transaction_id")
	}
	if first, ok := p.seen[id]; ok {
		return fmt.Errorf("%s is on line %d already", id, first)
	}
	p.seen[id] = line
	if acct := p.get(rec, colAccount); p.account != "" && acct != "" && acct != p.account {
		return fmt.Errorf("the row is of account %s, not %s", acct, p.account)
	}
	currency := strings.ToUpper(p.get(rec, "currency"))
	if currencies.Var(currency, "iso4217") != nil {
		return fmt.Errorf("unknown currency %q", p.get(rec, "currency"))
	}
	created, err := parseTime(p.get(rec, "created_utc"))
	if err != nil {
		return err
	}
	var amounts [3]decimal.Decimal
	for i, name := range []string{"gross", "fee", "net"} {
		if amounts[i], err = decimal.NewFromString(p.get(rec, name)); err != nil {
			return fmt.Errorf("%s %q is not a decimal", name, p.get(rec, name))
		}
	}
	gross, fee, net := amounts[0], amounts[1], amounts[2]
	if !gross.Sub(fee).Equal(net) {
		return fmt.Errorf("net %s is not gross %s less fee %s", net, gross, fee)
	}
	category := p.get(rec, "reporting_category")
	if !categories[category] {
		return fmt.Errorf("unknown reporting_category %q", category)
	}
	if category == categoryPay {
		books.Payouts = append(books.Payouts, app.Payout{ID: p.get(rec, "automatic_payout_id"), Amount: gross.Neg(),
			Currency: currency, Created: created})
		return nil
	}
	books.Movements = append(books.Movements, app.ProviderMovement{ID: id, Category: app.MovementCategory(category),
		PaymentRef: p.get(rec, colPaymentKey), RefundRef: p.get(rec, colRefundKey), Gross: gross, Fee: fee, Net: net,
		Currency: currency, Created: created, PayoutID: p.get(rec, "automatic_payout_id")})
	return nil
}

func parseTime(v string) (time.Time, error) {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("created_utc %q is not a time (YYYY-MM-DD hh:mm:ss, UTC)", v)
}

// Ledger is a parsed report as the provider's side of reconciliation
// (app.ProviderLedger): the movements made in a window, the payouts made
// in it, and every movement those paid out.
type Ledger struct {
	// Report is the parsed report.
	Report app.ProviderBooks
}

// Books implements app.ProviderLedger.
func (l Ledger) Books(_ context.Context, from, to time.Time) (app.ProviderBooks, error) {
	var out app.ProviderBooks
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	payouts := map[string]bool{}
	for _, p := range l.Report.Payouts {
		if in(p.Created) {
			payouts[p.ID] = true
			out.Payouts = append(out.Payouts, p)
		}
	}
	for _, m := range l.Report.Movements {
		if in(m.Created) || payouts[m.PayoutID] {
			out.Movements = append(out.Movements, m)
		}
	}
	return out, nil
}
