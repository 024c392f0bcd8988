package sandboxprovider

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"
)

// # The balance
//
// Every decision that moves money is booked, as it is recorded, as one or
// two balance transactions, in the words of Stripe's balance transactions
// and its itemized payout reconciliation report (reporting_category):
//
//	a succeeded charge     charge of its amount, less the fee
//	a succeeded capture    charge of the authorization's whole amount, less
//	                       the fee, and, for a partial capture, a
//	                       partial_capture_reversal of what it did not take
//	a succeeded refund     refund of minus its amount, no fee
//
// An authorization, a void, a decline or a refusal moves nothing. The fee
// is BalanceConfig's, of the charge's gross. Each transaction names the
// payment by the idempotency key its charge (or authorization) was made
// under, the payer's name of it, and a refund also by its own key: the
// references the service's reconciliation matches by.
//
// A payout pays out, per currency, every transaction not paid out yet:
// every BalanceConfig.PayoutInterval at the server, or at PayOut (POST
// /v1/payouts). Its amount is their net.
//
// The test hooks make what a real provider's books can hold and the
// service never did: a refund made at the provider only (RefundOutside),
// an amount the provider changed (ChangeAmount), a movement booked twice
// (Duplicate), a payout that does not add up to its transactions
// (ChangePayout).

// BalanceConfig is the balance's: the fee the provider keeps of a charge,
// how often it pays out, and its account's id.
type BalanceConfig struct {
	// FeePercent and FeeFixed are the fee of a charge: FeePercent % of
	// its gross plus FeeFixed, rounded half away from zero to the cent
	// (SANDBOX_FEE_PERCENT, SANDBOX_FEE_FIXED; none by default).
	FeePercent, FeeFixed decimal.Decimal
	// PayoutInterval is how often a server pays out what is not paid out
	// yet (SANDBOX_PAYOUT_INTERVAL); zero never: PayOut then does.
	PayoutInterval time.Duration
	// Account is the account's id in its reports (connected_account_id);
	// "acct_sandbox" when empty.
	Account string
}

// DefaultAccount is BalanceConfig.Account's default.
const DefaultAccount = "acct_sandbox"

// Reporting categories of the balance transactions.
const (
	CategoryCharge                 = "charge"
	CategoryRefund                 = "refund"
	CategoryPartialCaptureReversal = "partial_capture_reversal"
	CategoryPayout                 = "payout"
)

// BalanceTransaction is one movement of money at the provider.
type BalanceTransaction struct {
	ID string `json:"id"`
	// Created is when it was booked: when its decision was made.
	Created time.Time `json:"created"`
	// Amount is the gross, negative for money that left the balance; Fee
	// what the provider kept; Net is Amount less Fee.
	Amount   decimal.Decimal `json:"amount"`
	Fee      decimal.Decimal `json:"fee"`
	Net      decimal.Decimal `json:"net"`
	Currency string          `json:"currency"`
	// ReportingCategory is charge, refund or partial_capture_reversal.
	ReportingCategory string `json:"reportingCategory"`
	// Source is the id of the charge, capture or refund that made it.
	Source string `json:"source"`
	// Payment is the id of the charge or authorization of the payment.
	Payment string `json:"payment"`
	// PaymentKey is the idempotency key the payment's charge (or
	// authorization) was made under; RefundKey a refund's own, empty for
	// any other movement and for a refund made at the provider only.
	PaymentKey string `json:"paymentKey"`
	RefundKey  string `json:"refundKey,omitempty"`
	// Payout is the payout that paid it out; empty until then.
	Payout string `json:"payout,omitempty"`
}

// Payout is one payout: the net of its transactions, at the time it was
// made.
type Payout struct {
	ID       string          `json:"id"`
	Created  time.Time       `json:"created"`
	Amount   decimal.Decimal `json:"amount"`
	Currency string          `json:"currency"`
	// Transactions counts what it paid out.
	Transactions int `json:"transactions"`
}

// balance is the provider's journal of balance transactions and payouts.
// Every method is called with Provider.mu held.
type balance struct {
	p   *Provider
	cfg BalanceConfig
	// txns are in the order they were booked, Created never decreasing,
	// so a window of them is found by binary search.
	txns    []*BalanceTransaction
	byID    map[string]int
	payouts []*payoutEntry
	// outside are the refunds made at the provider only, by key.
	outside map[string]bool
	nextTxn int
}

type payoutEntry struct {
	Payout
	txns []int // indexes into balance.txns
}

func newBalance(p *Provider) *balance {
	b := &balance{p: p, cfg: p.cfg.Balance, byID: map[string]int{}, outside: map[string]bool{}}
	if b.cfg.Account == "" {
		b.cfg.Account = DefaultAccount
	}
	p.charges.recorded = func(key string, a ChargeAnswer) {
		if a.Status == StatusSucceeded {
			b.book(CategoryCharge, a.Decision, a.Amount, a.ID, key, "")
		}
	}
	p.captures.recorded = func(_ string, a CaptureAnswer) {
		if a.Status != StatusSucceeded {
			return
		}
		auth, _, _ := p.authorizations.lookup(a.Authorization)
		b.book(CategoryCharge, a.Decision, auth.Amount, auth.ID, a.Authorization, "")
		if rest := auth.Amount.Sub(a.Amount); rest.IsPositive() {
			b.book(CategoryPartialCaptureReversal, a.Decision, rest.Neg(), auth.ID, a.Authorization, "")
		}
	}
	p.refunds.recorded = func(key string, a RefundAnswer) {
		if a.Status != StatusSucceeded {
			return
		}
		payment, paymentKey := b.paymentOf(a.Charge)
		refundKey := key
		if b.outside[key] {
			refundKey = ""
		}
		b.book(CategoryRefund, a.Decision, a.Amount.Neg(), payment, paymentKey, refundKey)
	}
	return b
}

// paymentOf is the id and the key of the payment a refund names by key:
// a charge's, or a capture's authorization's.
func (b *balance) paymentOf(key string) (id, paymentKey string) {
	if c, _, found := b.p.captures.lookup(key); found == LookupCharged {
		auth, _, _ := b.p.authorizations.lookup(c.Authorization)
		return auth.ID, c.Authorization
	}
	c, _, _ := b.p.charges.lookup(key)
	return c.ID, key
}

// book adds a transaction of gross made by decision d.
func (b *balance) book(category string, d Decision, gross decimal.Decimal, payment, paymentKey, refundKey string) {
	fee := decimal.Zero
	if category == CategoryCharge {
		fee = b.fee(gross)
	}
	created := d.Created
	if n := len(b.txns); n > 0 && created.Before(b.txns[n-1].Created) {
		created = b.txns[n-1].Created // a clock set back must not unsort the journal
	}
	b.add(&BalanceTransaction{Created: created, Amount: gross, Fee: fee, Net: gross.Sub(fee), Currency: d.Currency,
		ReportingCategory: category, Source: d.ID, Payment: payment, PaymentKey: paymentKey, RefundKey: refundKey})
}

func (b *balance) add(t *BalanceTransaction) {
	b.nextTxn++
	t.ID = fmt.Sprintf("txn_%08d", b.nextTxn)
	b.byID[t.ID] = len(b.txns)
	b.txns = append(b.txns, t)
}

// fee is the fee of a charge of gross.
func (b *balance) fee(gross decimal.Decimal) decimal.Decimal {
	return gross.Mul(b.cfg.FeePercent).Div(decimal.NewFromInt(100)).Add(b.cfg.FeeFixed).Round(2)
}

// between are the transactions booked in [from, to); a zero bound is
// open.
func (b *balance) between(from, to time.Time) []*BalanceTransaction {
	i := 0
	if !from.IsZero() {
		i = sort.Search(len(b.txns), func(i int) bool { return !b.txns[i].Created.Before(from) })
	}
	j := len(b.txns)
	if !to.IsZero() {
		j = sort.Search(len(b.txns), func(i int) bool { return !b.txns[i].Created.Before(to) })
	}
	if j < i {
		j = i
	}
	return b.txns[i:j]
}

// payOut makes one payout a currency of every transaction not paid out
// yet, in the order of currencies' first transactions.
func (b *balance) payOut(now time.Time) []Payout {
	byCurrency := map[string]*payoutEntry{}
	var made []*payoutEntry
	for i, t := range b.txns {
		if t.Payout != "" {
			continue
		}
		e := byCurrency[t.Currency]
		if e == nil {
			e = &payoutEntry{Payout: Payout{ID: fmt.Sprintf("po_%08d", len(b.payouts)+len(made)+1), Created: now.UTC(), Currency: t.Currency}}
			byCurrency[t.Currency] = e
			made = append(made, e)
		}
		t.Payout = e.ID
		e.Amount = e.Amount.Add(t.Net)
		e.txns = append(e.txns, i)
		e.Transactions++
	}
	out := make([]Payout, len(made))
	for i, e := range made {
		b.payouts = append(b.payouts, e)
		out[i] = e.Payout
	}
	return out
}

func (b *balance) payout(id string) *payoutEntry {
	for _, e := range b.payouts {
		if e.ID == id {
			return e
		}
	}
	return nil
}

// BalanceTransactions returns every balance transaction, in the order
// they were booked.
func (p *Provider) BalanceTransactions() []BalanceTransaction {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]BalanceTransaction, len(p.balance.txns))
	for i, t := range p.balance.txns {
		out[i] = *t
	}
	return out
}

// Payouts returns every payout, in the order they were made.
func (p *Provider) Payouts() []Payout {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Payout, len(p.balance.payouts))
	for i, e := range p.balance.payouts {
		out[i] = e.Payout
	}
	return out
}

// PayOut pays out now, per currency, every transaction not paid out yet,
// and returns the payouts it made (none when there was nothing to pay).
func (p *Provider) PayOut() []Payout {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.balance.payOut(p.now())
}

// Errors of the test hooks.
var (
	// ErrNoSuchTransaction: no balance transaction, or no payout, has the
	// id.
	ErrNoSuchTransaction = errors.New("no such balance transaction or payout")
	// ErrRefundOutsideRefused: the refund cannot be made (what it names
	// took nothing, or has less left than asked).
	ErrRefundOutsideRefused = errors.New("refund refused")
)

// RefundOutside refunds amount of the charge (or capture) made under
// chargeKey as the provider's dashboard would: under a key and a
// reference of the provider's own, so its balance transaction carries no
// refund key of the service's, and no event is sent. It is refused as
// an API refund is when the charge cannot give amount back.
func (p *Provider) RefundOutside(chargeKey string, amount decimal.Decimal) (BalanceTransaction, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	target, refusal := p.refundTargetLocked(chargeKey)
	switch {
	case refusal != "":
	case !amount.IsPositive():
		refusal = "the amount must be positive"
	case amount.GreaterThan(target.Amount.Sub(p.refundedLocked(chargeKey))):
		refusal = fmt.Sprintf("the %s has less than %s left to refund", target.noun, amount)
	}
	if refusal != "" {
		return BalanceTransaction{}, fmt.Errorf("%w: %s", ErrRefundOutsideRefused, refusal)
	}
	key := fmt.Sprintf("dashboard_refund_%08d", p.refunds.nextID+1)
	req := refundRequest{chargeRequest: chargeRequest{Amount: amount, Currency: target.Currency, Reference: "dashboard_" + key}, Charge: chargeKey}
	p.balance.outside[key] = true
	p.refunds.byKey[key] = &entry[refundRequest, RefundAnswer]{req: req}
	c := &p.refundCounters
	a := RefundAnswer{Decision: p.refunds.decide(key, req, "re_", &c.Refunds, &c.Declines, p.now()), Charge: chargeKey}
	p.refunds.record(key, a)
	return *p.balance.txns[len(p.balance.txns)-1], nil
}

// ChangeAmount changes a transaction's gross to amount, as a provider
// that amended its books would: a charge's fee is the fee of the new
// amount, its net follows, and the payout that paid it out, if any,
// changes by as much (the provider's books agree with themselves; not
// with the service's).
func (p *Provider) ChangeAmount(id string, amount decimal.Decimal) (BalanceTransaction, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.balance.byID[id]
	if !ok {
		return BalanceTransaction{}, fmt.Errorf("%w: %s", ErrNoSuchTransaction, id)
	}
	t := p.balance.txns[i]
	fee := t.Fee
	if t.ReportingCategory == CategoryCharge {
		fee = p.balance.fee(amount)
	}
	net := amount.Sub(fee)
	if e := p.balance.payout(t.Payout); e != nil {
		e.Amount = e.Amount.Add(net.Sub(t.Net))
	}
	t.Amount, t.Fee, t.Net = amount, fee, net
	return *t, nil
}

// Duplicate books the transaction id again under a new id, at the same
// time and not paid out: the same money moved twice.
func (p *Provider) Duplicate(id string) (BalanceTransaction, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.balance.byID[id]
	if !ok {
		return BalanceTransaction{}, fmt.Errorf("%w: %s", ErrNoSuchTransaction, id)
	}
	dup := *p.balance.txns[i]
	dup.Payout = ""
	if n := len(p.balance.txns); dup.Created.Before(p.balance.txns[n-1].Created) {
		dup.Created = p.balance.txns[n-1].Created
	}
	p.balance.add(&dup)
	return dup, nil
}

// ChangePayout changes a payout's amount to amount, leaving its
// transactions as they are: a payout that does not add up.
func (p *Provider) ChangePayout(id string, amount decimal.Decimal) (Payout, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.balance.payout(id)
	if e == nil {
		return Payout{}, fmt.Errorf("%w: %s", ErrNoSuchTransaction, id)
	}
	e.Amount = amount
	return e.Payout, nil
}

// payOutEvery pays out every BalanceConfig.PayoutInterval until the
// server stops.
func (s *Server) payOutEvery() {
	t := time.NewTicker(s.cfg.Balance.PayoutInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.PayOut()
		}
	}
}
