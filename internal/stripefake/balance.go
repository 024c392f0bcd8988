package stripefake

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// # Balance transactions and payouts
//
// The fake publishes what Stripe's balance does, made from the objects it
// keeps whenever it is read: a succeeded PaymentIntent's charge (the
// whole authorized amount) less the fee (Config.FeeBasisPoints,
// Config.FeeFixed), with a partial_capture_reversal of what a capture did
// not take; each refund, and a refund_failure of one that failed.
// GET /v1/balance_transactions lists them (created filters, payout=, pages
// of at most 100, newest first; expand[]=data.source gives each its
// Charge or Refund, and data.source.payment_intent the PaymentIntent
// under it, with the metadata the service's references ride in).
// PayOut pays out, per currency, what no payout has paid out yet, and GET
// /v1/payouts lists the payouts.

// balanceTxn is a BalanceTransaction as Stripe shapes it.
type balanceTxn struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Amount            int64    `json:"amount"`
	AvailableOn       int64    `json:"available_on"`
	BalanceType       string   `json:"balance_type"`
	Created           int64    `json:"created"`
	Currency          string   `json:"currency"`
	Description       *string  `json:"description"`
	ExchangeRate      *float64 `json:"exchange_rate"`
	Fee               int64    `json:"fee"`
	FeeDetails        []any    `json:"fee_details"`
	Net               int64    `json:"net"`
	ReportingCategory string   `json:"reporting_category"`
	Source            any      `json:"source"`
	Status            string   `json:"status"`
	Type              string   `json:"type"`

	seq      int64
	sourceOf func(expandIntent bool) any // the expanded source; under s.mu
}

// payout is a Payout as Stripe shapes it (the fields the fake keeps).
type payout struct {
	ID                   string            `json:"id"`
	Object               string            `json:"object"`
	Amount               int64             `json:"amount"`
	ArrivalDate          int64             `json:"arrival_date"`
	Automatic            bool              `json:"automatic"`
	Created              int64             `json:"created"`
	Currency             string            `json:"currency"`
	Livemode             bool              `json:"livemode"`
	Metadata             map[string]string `json:"metadata"`
	Method               string            `json:"method"`
	ReconciliationStatus string            `json:"reconciliation_status"`
	SourceType           string            `json:"source_type"`
	Status               string            `json:"status"`
	Type                 string            `json:"type"`

	txns []string
	seq  int64
}

// balance is the payouts and what they paid out, beside the objects.
type balance struct {
	payouts []*payout
	paidOut map[string]string // balance transaction -> payout
}

// balanceTxnsLocked are the balance transactions of the objects the fake
// keeps; under s.mu.
func (s *Server) balanceTxnsLocked() []*balanceTxn {
	var out []*balanceTxn
	for _, p := range s.intents {
		if p.Status != statusSucceeded || p.LatestCharge == nil {
			continue
		}
		ch, intent := *p.LatestCharge, p
		source := func(expand bool) any {
			c := s.chargeOf(intent)
			if expand {
				return chargeWithIntent{charge: c, PaymentIntent: copyIntent(intent)}
			}
			return c
		}
		out = append(out, s.txn("txn_"+ch, "charge", "charge", p.Amount, p.Currency, p.Created, p.seq, ch, source))
		if rest := p.Amount - p.AmountReceived; rest > 0 {
			out = append(out, s.txn("txn_"+ch+"_reversal", "adjustment", "partial_capture_reversal", -rest, p.Currency, p.Created, p.seq, ch, source))
		}
	}
	for _, rf := range s.refunds {
		r := rf
		source := func(expand bool) any {
			if expand {
				return refundWithIntent{refund: copyRefund(r), PaymentIntent: copyIntent(s.intents[*r.PaymentIntent])}
			}
			return copyRefund(r)
		}
		out = append(out, s.txn("txn_"+r.ID, "refund", "refund", -r.Amount, r.Currency, r.Created, r.seq, r.ID, source))
		if r.Status == refundFailed {
			out = append(out, s.txn("txn_"+r.ID+"_failure", "payment_failure_refund", "refund_failure", r.Amount, r.Currency, r.Created, r.seq, r.ID, source))
		}
	}
	newestFirst(out, func(t *balanceTxn) (int64, int64) { return t.Created, t.seq })
	return out
}

// chargeWithIntent and refundWithIntent are a source with its
// payment_intent expanded.
type chargeWithIntent struct {
	*charge
	PaymentIntent *paymentIntent `json:"payment_intent"`
}

type refundWithIntent struct {
	*refund
	PaymentIntent *paymentIntent `json:"payment_intent"`
}

func (s *Server) txn(id, typ, category string, amount int64, currency string, created, seq int64, source string,
	sourceOf func(bool) any) *balanceTxn {
	fee := int64(0)
	if category == "charge" {
		fee = s.fee(amount)
	}
	return &balanceTxn{ID: id, Object: "balance_transaction", Amount: amount, AvailableOn: created, BalanceType: "payments", Created: created,
		Currency: currency, Fee: fee, FeeDetails: []any{}, Net: amount - fee, ReportingCategory: category, Source: source,
		Status: "available", Type: typ, seq: seq, sourceOf: sourceOf}
}

// fee is the fee of a charge of amount minor units: FeeBasisPoints of it,
// rounded half away from zero, plus FeeFixed.
func (s *Server) fee(amount int64) int64 {
	if s.cfg.FeeBasisPoints == 0 && s.cfg.FeeFixed == 0 {
		return 0
	}
	return (amount*s.cfg.FeeBasisPoints+5000)/10000 + s.cfg.FeeFixed
}

// PayOut pays out, per currency, every balance transaction no payout has
// paid out yet, and returns the payouts' ids.
func (s *Server) PayOut() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.balance.paidOut == nil {
		s.balance.paidOut = map[string]string{}
	}
	byCurrency := map[string]*payout{}
	var made []string
	txns := s.balanceTxnsLocked()
	sort.SliceStable(txns, func(i, j int) bool { return txns[i].seq < txns[j].seq })
	for _, t := range txns {
		if s.balance.paidOut[t.ID] != "" {
			continue
		}
		po := byCurrency[t.Currency]
		if po == nil {
			now := s.now().Unix()
			po = &payout{ID: s.nextID("po"), Object: "payout", ArrivalDate: now, Automatic: true, Created: now,
				Currency: t.Currency, Metadata: map[string]string{}, Method: "standard", ReconciliationStatus: "completed", SourceType: "card",
				Status: "paid", Type: "bank_account", seq: s.seq}
			byCurrency[t.Currency] = po
			s.balance.payouts = append(s.balance.payouts, po)
			made = append(made, po.ID)
		}
		po.Amount += t.Net
		po.txns = append(po.txns, t.ID)
		s.balance.paidOut[t.ID] = po.ID
	}
	return made
}

// listBalanceTransactions is GET /v1/balance_transactions.
func (s *Server) listBalanceTransactions(_ *http.Request, q url.Values) (answer, *refusal) {
	f := newForm(q, "created", "limit", "starting_after", "ending_before", "expand", "payout", "type", "currency", "source")
	inWindow := f.created()
	pg := f.page()
	expandSource, expandIntent := false, false
	for name, vs := range q {
		if !strings.HasPrefix(name, "expand") {
			continue
		}
		for _, v := range vs {
			switch v {
			case "data.source":
				expandSource = true
			case "data.source.payment_intent":
				expandSource, expandIntent = true, true
			default:
				f.fail(invalid("expand", "This property cannot be expanded ("+v+")."))
			}
		}
	}
	payoutID := f.str("payout")
	if f.bad != nil {
		return answer{}, f.bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var inPayout map[string]bool
	if payoutID != "" {
		po := s.payoutLocked(payoutID)
		if po == nil {
			return answer{}, missing("payout", "No such payout: '"+payoutID+"'")
		}
		inPayout = map[string]bool{}
		for _, id := range po.txns {
			inPayout[id] = true
		}
	}
	var all []*balanceTxn
	for _, t := range s.balanceTxnsLocked() {
		if inWindow(t.Created) && (inPayout == nil || inPayout[t.ID]) {
			all = append(all, t)
		}
	}
	items, more := paged(all, func(t *balanceTxn) string { return t.ID }, pg)
	data := make([]any, len(items))
	for i, t := range items {
		c := *t
		if expandSource {
			c.Source = t.sourceOf(expandIntent)
		}
		data[i] = c
	}
	return answer{http.StatusOK, encode(list{Object: "list", Data: data, HasMore: more, URL: "/v1/balance_transactions"})}, nil
}

func (s *Server) payoutLocked(id string) *payout {
	for _, po := range s.balance.payouts {
		if po.ID == id {
			return po
		}
	}
	return nil
}

// listPayouts is GET /v1/payouts.
func (s *Server) listPayouts(_ *http.Request, q url.Values) (answer, *refusal) {
	f := newForm(q, "created", "limit", "starting_after", "ending_before", "expand", "status", "arrival_date", "destination")
	inWindow := f.created()
	pg := f.page()
	if f.bad != nil {
		return answer{}, f.bad
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*payout
	for _, po := range s.balance.payouts {
		if inWindow(po.Created) {
			all = append(all, po)
		}
	}
	newestFirst(all, func(po *payout) (int64, int64) { return po.Created, po.seq })
	items, more := paged(all, func(po *payout) string { return po.ID }, pg)
	data := make([]any, len(items))
	for i, po := range items {
		data[i] = po
	}
	return answer{http.StatusOK, encode(list{Object: "list", Data: data, HasMore: more, URL: "/v1/payouts"})}, nil
}
