package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
)

// Books implements app.ProviderLedger over the sandbox's balance API
// (GET /v1/balance_transactions and /v1/payouts): the transactions booked
// in [from, to), the payouts made then, and every transaction those
// payouts paid out. A transaction names our payment by the idempotency
// key its charge or authorization was made under (the payment's provider
// key) and a refund by its own: the references reconciliation matches by.
func (c *Client) Books(ctx context.Context, from, to time.Time) (app.ProviderBooks, error) {
	var books app.ProviderBooks
	seen := map[string]bool{}
	add := func(t balanceTransaction) {
		if !seen[t.ID] {
			seen[t.ID] = true
			books.Movements = append(books.Movements, t.movement())
		}
	}
	window := url.Values{"created[gte]": {from.UTC().Format(time.RFC3339Nano)}, "created[lt]": {to.UTC().Format(time.RFC3339Nano)}}
	if err := c.eachTransaction(ctx, window, add); err != nil {
		return app.ProviderBooks{}, err
	}
	var payouts balanceList[payout]
	if err := c.getJSON(ctx, "payouts", window, &payouts); err != nil {
		return app.ProviderBooks{}, err
	}
	for _, p := range payouts.Data {
		books.Payouts = append(books.Payouts, app.Payout{ID: p.ID, Amount: p.Amount, Currency: p.Currency, Created: p.Created})
		if err := c.eachTransaction(ctx, url.Values{"payout": {p.ID}}, add); err != nil {
			return app.ProviderBooks{}, err
		}
	}
	return books, nil
}

// booksPage is how many transactions one request of Books reads.
const booksPage = 10_000

// eachTransaction hands each transaction the query selects to each, page
// by page.
func (c *Client) eachTransaction(ctx context.Context, query url.Values, each func(balanceTransaction)) error {
	query.Set("limit", strconv.Itoa(booksPage))
	for {
		var page balanceList[balanceTransaction]
		if err := c.getJSON(ctx, "balance_transactions", query, &page); err != nil {
			return err
		}
		for _, t := range page.Data {
			each(t)
		}
		if !page.HasMore || len(page.Data) == 0 {
			return nil
		}
		query.Set("starting_after", page.Data[len(page.Data)-1].ID)
	}
}

// getJSON reads GET /v1/<path>?query into v.
func (c *Client) getJSON(ctx context.Context, path string, query url.Values, v any) error {
	u := c.charges.url.JoinPath("..", path)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox provider: GET %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return fmt.Errorf("sandbox provider: GET %s: %s: %s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("sandbox provider: GET %s: %w", path, err)
	}
	return nil
}

// balanceList, balanceTransaction and payout are the balance API's wire
// format.
type balanceList[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"hasMore"`
}

type balanceTransaction struct {
	ID                string          `json:"id"`
	Created           time.Time       `json:"created"`
	Amount            decimal.Decimal `json:"amount"`
	Fee               decimal.Decimal `json:"fee"`
	Net               decimal.Decimal `json:"net"`
	Currency          string          `json:"currency"`
	ReportingCategory string          `json:"reportingCategory"`
	PaymentKey        string          `json:"paymentKey"`
	RefundKey         string          `json:"refundKey"`
	Payout            string          `json:"payout"`
}

func (t balanceTransaction) movement() app.ProviderMovement {
	return app.ProviderMovement{ID: t.ID, Category: app.MovementCategory(t.ReportingCategory), PaymentRef: t.PaymentKey,
		RefundRef: t.RefundKey, Gross: t.Amount, Fee: t.Fee, Net: t.Net, Currency: t.Currency, Created: t.Created,
		PayoutID: t.Payout}
}

type payout struct {
	ID       string          `json:"id"`
	Created  time.Time       `json:"created"`
	Amount   decimal.Decimal `json:"amount"`
	Currency string          `json:"currency"`
}

var _ app.ProviderLedger = (*Client)(nil)
