package config

import (
	"slices"
	"time"

	"github.com/shopspring/decimal"
)

// Reconciliation configures reconciliation (docs/reconciliation.md): when
// it runs, over which window, and what it takes for a mismatch.
type Reconciliation struct {
	// Cron (RECONCILE_CRON, default "0 15 1 * * *": daily at 01:15 UTC)
	// is when the job runs on the elected replica; "off" never.
	Cron string
	// Window (RECONCILE_WINDOW, default 48h, 1m to 31 days) is how far
	// back a run looks from the time it runs: twice the day by default,
	// so every day is compared by two runs.
	Window time.Duration
	// Margin (RECONCILE_MARGIN, default 1h, 0 to 24h) widens the
	// provider's side of a window at both ends.
	Margin time.Duration
	// SettlementLag (RECONCILE_SETTLEMENT_LAG, default 15m, 0 to 72h) is
	// how long the provider may take to show a movement, and we to record
	// a decision it made: within it, a missing match is expected.
	SettlementLag time.Duration
	// PendingBound (RECONCILE_PENDING_BOUND, default 1h, 1s to 30 days) is
	// how long a record may stay PENDING before it is reported.
	PendingBound time.Duration
	// HoldWarning (RECONCILE_HOLD_WARNING, default 24h, 0 to 30 days) is
	// how long before its hold lapses an AUTHORIZED payment is reported;
	// HoldLifetime (RECONCILE_HOLD_LIFETIME, default 168h, 1h to 30 days)
	// how long a hold lasts at the provider.
	HoldWarning, HoldLifetime time.Duration
	// FeePercent and FeeFixed (RECONCILE_FEE_PERCENT, RECONCILE_FEE_FIXED)
	// are the contract's fee of a charge, FeePercent % of it plus
	// FeeFixed, to the cent; unset, fees are not compared.
	FeePercent, FeeFixed *decimal.Decimal
}

// reconciliation reads the RECONCILE_* variables.
func (p *parser) reconciliation() Reconciliation {
	r := Reconciliation{
		Window:        p.duration("RECONCILE_WINDOW", 48*time.Hour, time.Minute, 31*24*time.Hour),
		Margin:        p.duration("RECONCILE_MARGIN", time.Hour, 0, 24*time.Hour),
		SettlementLag: p.duration("RECONCILE_SETTLEMENT_LAG", 15*time.Minute, 0, 72*time.Hour),
		PendingBound:  p.duration("RECONCILE_PENDING_BOUND", time.Hour, time.Second, 30*24*time.Hour),
		HoldWarning:   p.duration("RECONCILE_HOLD_WARNING", 24*time.Hour, 0, 30*24*time.Hour),
		HoldLifetime:  p.duration("RECONCILE_HOLD_LIFETIME", 168*time.Hour, time.Hour, 30*24*time.Hour),
		FeePercent:    p.decimal("RECONCILE_FEE_PERCENT"),
		FeeFixed:      p.decimal("RECONCILE_FEE_FIXED"),
	}
	if v := p.str("RECONCILE_CRON", "", false); v != "off" {
		r.Cron = p.cron("RECONCILE_CRON", "0 15 1 * * *")
	}
	if r.FeeFixed != nil && r.FeePercent == nil {
		zero := decimal.Zero
		r.FeePercent = &zero
	}
	return r
}

// decimal reads a decimal of at least 0; unset is nil.
func (p *parser) decimal(name string) *decimal.Decimal {
	v := p.str(name, "", false)
	if v == "" {
		return nil
	}
	d, err := decimal.NewFromString(v)
	if err != nil || d.IsNegative() {
		p.fail(name, "must be a decimal of at least 0, such as 2.9, got %q", v)
		return nil
	}
	return &d
}

// operatorClients reads OPERATOR_CLIENTS: clients of API_KEYS that may
// read the operators' endpoints (/reconciliation/...).
func (p *parser) operatorClients(keys []APIKey) []string {
	clients := p.list("OPERATOR_CLIENTS")
	for _, c := range clients {
		if !slices.ContainsFunc(keys, func(k APIKey) bool { return k.ClientID == c }) {
			p.fail("OPERATOR_CLIENTS", "%q is no client of API_KEYS", c)
		}
	}
	return clients
}
