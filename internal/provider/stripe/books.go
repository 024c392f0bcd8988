package stripe

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	stripego "github.com/stripe/stripe-go/v82"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// Books implements app.ProviderLedger over Stripe's balance: GET
// /v1/balance_transactions created in [from, to), the automatic payouts
// (GET /v1/payouts) created then, and the transactions each paid out
// (payout=). Each transaction comes with its source expanded, and the
// source's PaymentIntent: our references ride in metadata, the payment's
// provider key in the PaymentIntent's (provider_key), a refund's in the
// Refund's. A transaction of a category reconciliation does not compare
// (fees, transfers, the payout itself) is left out. Stripe's created is in
// seconds: the window is read to the whole second around it.
func (c *Client) Books(ctx context.Context, from, to time.Time) (app.ProviderBooks, error) {
	var books app.ProviderBooks
	index := map[string]int{}
	add := func(t *stripego.BalanceTransaction, payout string) error {
		if i, seen := index[t.ID]; seen {
			if payout != "" {
				books.Movements[i].PayoutID = payout
			}
			return nil
		}
		m, ok, err := movementOf(t)
		if err != nil || !ok {
			return err
		}
		m.PayoutID = payout
		index[t.ID] = len(books.Movements)
		books.Movements = append(books.Movements, m)
		return nil
	}
	created := &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThan: to.Add(time.Second - 1).Unix()}
	if err := c.eachTransaction(ctx, &stripego.BalanceTransactionListParams{CreatedRange: created}, "", add); err != nil {
		return app.ProviderBooks{}, err
	}
	payouts := &stripego.PayoutListParams{ListParams: stripego.ListParams{Limit: stripego.Int64(pageSize)}, CreatedRange: created}
	for p, err := range c.api.V1Payouts.List(ctx, payouts) {
		if err != nil {
			return app.ProviderBooks{}, fmt.Errorf("stripe: list payouts: %w", err)
		}
		amount, err := major(p.Amount, string(p.Currency))
		if err != nil {
			return app.ProviderBooks{}, err
		}
		books.Payouts = append(books.Payouts, app.Payout{ID: p.ID, Amount: amount, Currency: strings.ToUpper(string(p.Currency)),
			Created: time.Unix(p.Created, 0).UTC()})
		if err := c.eachTransaction(ctx, &stripego.BalanceTransactionListParams{Payout: stripego.String(p.ID)}, p.ID, add); err != nil {
			return app.ProviderBooks{}, err
		}
	}
	return books, nil
}

// eachTransaction hands each transaction params selects to each, with
// payout, every page.
func (c *Client) eachTransaction(ctx context.Context, params *stripego.BalanceTransactionListParams, payout string,
	each func(*stripego.BalanceTransaction, string) error) error {
	params.Limit = stripego.Int64(pageSize)
	params.AddExpand("data.source")
	params.AddExpand("data.source.payment_intent")
	for t, err := range c.api.V1BalanceTransactions.List(ctx, params) {
		if err != nil {
			return fmt.Errorf("stripe: list balance transactions: %w", err)
		}
		if err := each(t, payout); err != nil {
			return err
		}
	}
	return nil
}

// compared are the reporting categories reconciliation compares.
var compared = map[stripego.BalanceTransactionReportingCategory]app.MovementCategory{
	stripego.BalanceTransactionReportingCategoryCharge:                 app.CategoryCharge,
	stripego.BalanceTransactionReportingCategoryRefund:                 app.CategoryRefund,
	stripego.BalanceTransactionReportingCategoryRefundFailure:          app.CategoryRefundFailure,
	stripego.BalanceTransactionReportingCategoryPartialCaptureReversal: app.CategoryPartialCaptureReversal,
	stripego.BalanceTransactionReportingCategoryDispute:                app.CategoryDispute,
}

// movementOf is t as a movement, with the references its source carries;
// ok is false for a category not compared.
func movementOf(t *stripego.BalanceTransaction) (m app.ProviderMovement, ok bool, err error) {
	category, ok := compared[t.ReportingCategory]
	if !ok {
		return m, false, nil
	}
	var amounts [3]decimal.Decimal
	for i, units := range []int64{t.Amount, t.Fee, t.Net} {
		if amounts[i], err = major(units, string(t.Currency)); err != nil {
			return m, false, err
		}
	}
	m = app.ProviderMovement{ID: t.ID, Category: category, Gross: amounts[0], Fee: amounts[1], Net: amounts[2],
		Currency: strings.ToUpper(string(t.Currency)), Created: time.Unix(t.Created, 0).UTC()}
	if s := t.Source; s != nil {
		switch {
		case s.Charge != nil:
			m.PaymentRef = paymentKeyOf(s.Charge.PaymentIntent, s.Charge.Metadata)
		case s.Refund != nil:
			m.PaymentRef = paymentKeyOf(s.Refund.PaymentIntent, nil)
			m.RefundRef = s.Refund.Metadata[metaProviderKey]
		case s.Dispute != nil && s.Dispute.PaymentIntent != nil:
			m.PaymentRef = paymentKeyOf(s.Dispute.PaymentIntent, nil)
		}
	}
	return m, true, nil
}

// paymentKeyOf is our payment's provider key, from its PaymentIntent's
// metadata, or else the charge's (which carries the PaymentIntent's).
func paymentKeyOf(pi *stripego.PaymentIntent, charge map[string]string) string {
	if pi != nil && pi.Metadata[metaProviderKey] != "" {
		return pi.Metadata[metaProviderKey]
	}
	return charge[metaProviderKey]
}

// major is units of currency's minor unit in major units: 1050 EUR cents
// is 10.50, 500 JPY is 500.
func major(units int64, currency string) (decimal.Decimal, error) {
	c, err := domain.ParseCurrency(strings.ToUpper(currency))
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("stripe: a balance transaction in %q: %w", currency, err)
	}
	return decimal.New(units, -c.MinorUnits()), nil
}

var _ app.ProviderLedger = (*Client)(nil)
