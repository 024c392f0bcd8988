package sandboxprovider

import (
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// The balance's API (balance.go):
//
//	GET  /v1/balance_transactions   the transactions booked in a window, in the order they were booked:
//	     ?created[gte]=<RFC 3339>&created[lt]=<RFC 3339>  (each optional)
//	     or ?payout=po_...            the transactions a payout paid out
//	     &limit=N (1 to 10000, default 100)&starting_after=txn_...
//	     {"data":[{"id":"txn_...","amount":"97.00",...}],"hasMore":false}
//	GET  /v1/payouts                the payouts made in a window (created[gte], created[lt])
//	POST /v1/payouts                pay out now; answers the payouts made
//	GET  /v1/reports/payout_reconciliation.csv
//	     ?created[gte]=&created[lt]=  the window's transactions, those its payouts paid out, and a
//	                                  payout row per payout, in the columns of Stripe's itemized
//	                                  payout reconciliation report (reportColumns)
//
// and the test hooks, which make what the service never did:
//
//	POST /v1/admin/refunds                                 {"charge":"<key>","amount":"10.00"}: a refund made at the provider only
//	POST /v1/admin/balance_transactions/{id}/amount        {"amount":"90.00"}: an amount the provider changed
//	POST /v1/admin/balance_transactions/{id}/duplicate     the movement booked twice
//	POST /v1/admin/payouts/{id}/amount                     {"amount":"1.00"}: a payout that does not add up
func (p *Provider) balanceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/balance_transactions", p.listBalanceTransactions)
	mux.HandleFunc("GET /v1/payouts", p.listPayouts)
	mux.HandleFunc("POST /v1/payouts", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, listOf(p.PayOut(), false))
	})
	mux.HandleFunc("GET /v1/reports/payout_reconciliation.csv", p.payoutReconciliationReport)
	mux.HandleFunc("POST /v1/admin/refunds", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Charge string `json:"charge"`
			Amount string `json:"amount"`
		}
		if err := decodeBody(r.Body, "refund", &in); err != nil {
			writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, err.Error(), nil)
			return
		}
		amount, err := decimal.NewFromString(in.Amount)
		if err != nil {
			writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, "amount must be a decimal string", nil)
			return
		}
		t, err := p.RefundOutside(in.Charge, amount)
		answerHook(w, t, err)
	})
	mux.HandleFunc("POST /v1/admin/balance_transactions/{id}/amount", func(w http.ResponseWriter, r *http.Request) {
		if amount, ok := amountOf(w, r); ok {
			t, err := p.ChangeAmount(r.PathValue("id"), amount)
			answerHook(w, t, err)
		}
	})
	mux.HandleFunc("POST /v1/admin/balance_transactions/{id}/duplicate", func(w http.ResponseWriter, r *http.Request) {
		t, err := p.Duplicate(r.PathValue("id"))
		answerHook(w, t, err)
	})
	mux.HandleFunc("POST /v1/admin/payouts/{id}/amount", func(w http.ResponseWriter, r *http.Request) {
		if amount, ok := amountOf(w, r); ok {
			po, err := p.ChangePayout(r.PathValue("id"), amount)
			answerHook(w, po, err)
		}
	})
}

// BalanceList is the body of a list of the balance's API.
type BalanceList[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"hasMore"`
}

func listOf[T any](data []T, more bool) BalanceList[T] {
	if data == nil {
		data = []T{}
	}
	return BalanceList[T]{Data: data, HasMore: more}
}

// answerHook writes a test hook's result: the object, or its error.
func answerHook[T any](w http.ResponseWriter, v T, err error) {
	switch {
	case errors.Is(err, ErrNoSuchTransaction):
		writeError(w, http.StatusNotFound, "resource_missing", err.Error(), nil)
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, ErrTypeInvalidRequest, err.Error(), nil)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func amountOf(w http.ResponseWriter, r *http.Request) (decimal.Decimal, bool) {
	var in struct {
		Amount string `json:"amount"`
	}
	err := decodeBody(r.Body, "amount", &in)
	amount, parseErr := decimal.NewFromString(in.Amount)
	if err != nil || parseErr != nil {
		writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, `the body must be {"amount":"<decimal>"}`, nil)
		return decimal.Zero, false
	}
	return amount, true
}

// window reads created[gte] and created[lt]; a missing bound is open.
func window(r *http.Request) (from, to time.Time, err error) {
	q := r.URL.Query()
	for _, b := range []struct {
		name string
		at   *time.Time
	}{{"created[gte]", &from}, {"created[lt]", &to}} {
		if v := q.Get(b.name); v != "" {
			if *b.at, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return from, to, fmt.Errorf("%s must be an RFC 3339 time, got %q", b.name, v)
			}
		}
	}
	return from, to, nil
}

const (
	defaultListLimit = 100
	maxListLimit     = 10_000
)

func (p *Provider) listBalanceTransactions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, to, err := window(r)
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" && err == nil {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxListLimit {
			err = fmt.Errorf("limit must be 1 to %d", maxListLimit)
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, err.Error(), nil)
		return
	}
	p.mu.Lock()
	var all []*BalanceTransaction
	if id := q.Get("payout"); id != "" {
		e := p.balance.payout(id)
		if e == nil {
			p.mu.Unlock()
			writeError(w, http.StatusNotFound, "resource_missing", "no payout "+id, nil)
			return
		}
		for _, i := range e.txns {
			all = append(all, p.balance.txns[i])
		}
	} else {
		all = p.balance.between(from, to)
	}
	if after := q.Get("starting_after"); after != "" {
		i := 0
		for i < len(all) && all[i].ID != after {
			i++
		}
		if i < len(all) {
			all = all[i+1:]
		} else {
			all = nil
		}
	}
	more := len(all) > limit
	page := make([]BalanceTransaction, min(limit, len(all)))
	for i := range page {
		page[i] = *all[i]
	}
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, listOf(page, more))
}

func (p *Provider) listPayouts(w http.ResponseWriter, r *http.Request) {
	from, to, err := window(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, err.Error(), nil)
		return
	}
	writeJSON(w, http.StatusOK, listOf(p.payoutsBetween(from, to), false))
}

// payoutsBetween are the payouts made in [from, to); a zero bound is
// open.
func (p *Provider) payoutsBetween(from, to time.Time) []Payout {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Payout
	for _, e := range p.balance.payouts {
		if (from.IsZero() || !e.Created.Before(from)) && (to.IsZero() || e.Created.Before(to)) {
			out = append(out, e.Payout)
		}
	}
	return out
}

// reportColumns are the report's columns, named as in Stripe's itemized
// payout reconciliation report; payment_metadata[provider_key] and
// refund_metadata[provider_key] are the metadata columns of the key the
// service sends.
var reportColumns = []string{
	"balance_transaction_id", "created_utc", "currency", "gross", "fee", "net", "reporting_category",
	"source_id", "payment_intent_id", "payment_metadata[provider_key]", "refund_metadata[provider_key]",
	"automatic_payout_id", "automatic_payout_effective_at_utc", "connected_account_id",
}

// reportTime is how the report writes a time, as Stripe's reports do.
const reportTime = "2006-01-02 15:04:05"

// payoutReconciliationReport writes the report of a window: its
// transactions, the transactions its payouts paid out wherever booked,
// and one payout row per payout (reporting_category payout, gross minus
// its amount, as Stripe's balance reports show a payout). Amounts are in
// major units, currencies in lower case, as Stripe writes them.
func (p *Provider) payoutReconciliationReport(w http.ResponseWriter, r *http.Request) {
	from, to, err := window(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrTypeInvalidRequest, err.Error(), nil)
		return
	}
	rows := [][]string{reportColumns}
	p.mu.Lock()
	payouts := map[string]*payoutEntry{}
	seen := map[string]bool{}
	row := func(t *BalanceTransaction) {
		if seen[t.ID] {
			return
		}
		seen[t.ID] = true
		effective := ""
		if e := payouts[t.Payout]; e != nil {
			effective = e.Created.UTC().Format(reportTime)
		} else if e := p.balance.payout(t.Payout); e != nil {
			payouts[t.Payout] = e
			effective = e.Created.UTC().Format(reportTime)
		}
		rows = append(rows, []string{t.ID, t.Created.UTC().Format(reportTime), strings.ToLower(t.Currency),
			t.Amount.StringFixed(2), t.Fee.StringFixed(2), t.Net.StringFixed(2), t.ReportingCategory, t.Source,
			t.Payment, t.PaymentKey, t.RefundKey, t.Payout, effective, p.balance.cfg.Account})
	}
	for _, t := range p.balance.between(from, to) {
		row(t)
	}
	for _, e := range p.balance.payouts {
		if (!from.IsZero() && e.Created.Before(from)) || (!to.IsZero() && !e.Created.Before(to)) {
			continue
		}
		for _, i := range e.txns {
			row(p.balance.txns[i])
		}
		at := e.Created.UTC().Format(reportTime)
		rows = append(rows, []string{e.ID, at, strings.ToLower(e.Currency), e.Amount.Neg().StringFixed(2), "0.00",
			e.Amount.Neg().StringFixed(2), CategoryPayout, e.ID, "", "", "", e.ID, at, p.balance.cfg.Account})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "text/csv")
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	_ = cw.WriteAll(rows) // the client sees a truncated report if this fails
}
