package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// ProviderLedger is the provider's side of the books: its balance
// transactions and payouts (the sandbox's GET /v1/balance_transactions,
// Stripe's, or a report the provider sent).
type ProviderLedger interface {
	// Books returns the movements made in [from, to), the payouts made in
	// [from, to), and every movement those payouts paid out, wherever it
	// was made; each movement once.
	Books(ctx context.Context, from, to time.Time) (ProviderBooks, error)
}

// ReconciliationStore keeps our side of the books and what reconciling
// them finds.
type ReconciliationStore interface {
	// BookedInWindow returns our payments reserved in [from, to) or with
	// a capture or void reserved then, and our refunds reserved in [from,
	// to): every record that can have been decided in the window (a
	// record is decided after it is reserved), and every PENDING one
	// reserved then.
	BookedInWindow(ctx context.Context, from, to time.Time) (OurBooks, error)
	// BookedByRef returns our payments and refunds whose provider keys are
	// among paymentRefs and refundRefs, wherever they were reserved; a ref
	// we hold nothing under is left out.
	BookedByRef(ctx context.Context, paymentRefs, refundRefs []string) (OurBooks, error)
	// OpenItems returns every open item.
	OpenItems(ctx context.Context) ([]ReconciliationItem, error)
	// SaveRun keeps a successful run in one transaction: the run, each
	// mismatch found as an open item under its key (one item a key,
	// whatever runs find it, reopened if it was closed), and the open
	// items under closed closed by the run. A run writes an item only if
	// no run judged it at a later Now: of two runs that overlap, the
	// later one's judgement stands, whichever commits last. It returns
	// the run with its id and how many items it closed.
	SaveRun(ctx context.Context, run ReconciliationRun, found []Mismatch, closed []string) (ReconciliationRun, error)
	// SaveFailedRun keeps a run that failed, with its error.
	SaveFailedRun(ctx context.Context, run ReconciliationRun) error
}

// ReconciliationItem is a mismatch as it is kept: open until a run that
// judges its subject again does not find it.
type ReconciliationItem struct {
	Mismatch
	// ID is the item's row.
	ID int64
	// Open is false once a run closed it.
	Open bool
	// FirstRun found it first, LastRun last; ClosedRun closed it (0 while
	// open).
	FirstRun, LastRun, ClosedRun int64
	// FirstSeen and LastSeen are those runs' Now; Closed ClosedRun's.
	FirstSeen, LastSeen, Closed time.Time
}

// Run statuses.
const (
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
)

// ReconciliationRun is one comparison of a window and what it found.
type ReconciliationRun struct {
	// ID is the run's row; 0 until it is kept.
	ID int64
	// From and To are the window compared.
	From, To time.Time
	// Started is when the run began (the comparison's Now); Finished when
	// it was kept.
	Started, Finished time.Time
	// Status is RunSucceeded or RunFailed; Error says why it failed.
	Status, Error string
	// Movements and Payouts count the provider's side read; Payments and
	// Refunds ours.
	Movements, Payouts, Payments, Refunds int
	// Matched counts what both sides agree on; Found the mismatches;
	// Expected what is still inside the settlement lag.
	Matched, Found, Expected int
	// Opened counts the items found that were not open before the run;
	// Closed the items it closed.
	Opened, Closed int
	// Lookups counts the missing_in_service items about a payment of ours
	// still PENDING or AUTHORIZED: a lost answer, which the completer's
	// lookup settles (the job wakes it).
	Lookups int
}

// MatchRate is the share of what the run compared that both sides agree
// on, from 0 to 1; 1 when it compared nothing.
func (r ReconciliationRun) MatchRate() float64 {
	if r.Matched+r.Found == 0 {
		return 1
	}
	return float64(r.Matched) / float64(r.Matched+r.Found)
}

// ReconcilePolicy says how a window is compared.
type ReconcilePolicy struct {
	// Margin widens the provider's side of a window on both ends: a
	// movement made a little before a record of ours that is reserved in
	// the window (or after one decided in it, by a clock that runs ahead)
	// is still read, and our records named by it too.
	Margin time.Duration
	// SettlementLag, PendingBound and HoldWarning are ReconcileWindow's.
	SettlementLag, PendingBound, HoldWarning time.Duration
	// HoldLifetime is how long after its authorization a hold lapses at
	// the provider (7 days at the sandbox and Stripe); an AUTHORIZED
	// payment's hold is taken to lapse then.
	HoldLifetime time.Duration
	// Fees, when set, is the contract's fee of a charge: a movement
	// whose fee differs is reported.
	Fees *FeePolicy
}

// ReconcileBooks is reconciliation's use case: it reads both sides of a
// window, compares them (Reconcile) and keeps what it found, so that an
// operator is told exactly where the books disagree. It never moves money
// and never changes a payment or a refund: what it finds is a list of
// items, each open until a later run that compares the same thing again
// does not find it.
//
// Running a window again finds the same items under the same keys and
// doubles none (SaveRun upserts by key); a run killed before SaveRun
// leaves nothing.
type ReconcileBooks struct {
	provider ProviderLedger
	store    ReconciliationStore
	policy   ReconcilePolicy
}

// NewReconcileBooks builds the use case.
func NewReconcileBooks(provider ProviderLedger, store ReconciliationStore, policy ReconcilePolicy) *ReconcileBooks {
	return &ReconcileBooks{provider: provider, store: store, policy: policy}
}

// ErrRunNotFound: no such reconciliation run.
var ErrRunNotFound = errors.New("reconciliation run not found")

// ErrBadWindow: a window that ends before it begins, or in the future.
var ErrBadWindow = errors.New("the window must end after it begins, and not after now")

// Handle compares the window [from, to) as of now, keeps the run and
// returns it. A run that fails is kept as failed, with its error, and
// changes no item.
func (uc *ReconcileBooks) Handle(ctx context.Context, from, to, now time.Time) (ReconciliationRun, error) {
	run := ReconciliationRun{From: from.UTC(), To: to.UTC(), Started: now.UTC()}
	if !from.Before(to) || to.After(now) {
		return run, fmt.Errorf("%w: [%s, %s) at %s", ErrBadWindow, from, to, now)
	}
	run, err := uc.run(ctx, run)
	if err != nil {
		run.Status, run.Error = RunFailed, err.Error()
		if saveErr := uc.store.SaveFailedRun(context.WithoutCancel(ctx), run); saveErr != nil {
			err = errors.Join(err, fmt.Errorf("keeping the failed run: %w", saveErr))
		}
		return run, err
	}
	return run, nil
}

func (uc *ReconcileBooks) run(ctx context.Context, run ReconciliationRun) (ReconciliationRun, error) {
	p := uc.policy
	theirTo := run.To.Add(p.Margin)
	if theirTo.After(run.Started) {
		theirTo = run.Started
	}
	theirs, err := uc.provider.Books(ctx, run.From.Add(-p.Margin), theirTo)
	if err != nil {
		return run, fmt.Errorf("reading the provider's books: %w", err)
	}
	ours, err := uc.store.BookedInWindow(ctx, run.From.Add(-p.Margin), run.To)
	if err != nil {
		return run, fmt.Errorf("reading our books: %w", err)
	}
	open, err := uc.store.OpenItems(ctx)
	if err != nil {
		return run, fmt.Errorf("reading the open items: %w", err)
	}
	// Our records the provider's movements name, and those the open items
	// about our side name, wherever they were reserved: the first to
	// compare with, the others to tell whether their items still stand.
	paymentRefs, refundRefs := refsNotHeld(ours, theirs, open)
	named, err := uc.store.BookedByRef(ctx, paymentRefs, refundRefs)
	if err != nil {
		return run, fmt.Errorf("reading our books: %w", err)
	}
	ours.Payments = append(ours.Payments, named.Payments...)
	ours.Refunds = append(ours.Refunds, named.Refunds...)
	for i := range ours.Payments {
		if b := &ours.Payments[i]; b.Status == domain.PaymentAuthorized && p.HoldLifetime > 0 {
			b.HoldExpiresAt = b.CreatedAt.Add(p.HoldLifetime)
		}
	}

	w := ReconcileWindow{From: run.From, To: run.To, Now: run.Started, SettlementLag: p.SettlementLag,
		PendingBound: p.PendingBound, HoldWarning: p.HoldWarning, Fees: p.Fees}
	got := Reconcile(w, ours, theirs)

	openKeys := make(map[string]bool, len(open))
	for _, item := range open {
		openKeys[item.Key] = true
	}
	found := make(map[string]bool, len(got.Mismatches)+len(got.Expected))
	for _, m := range got.Mismatches {
		found[m.Key] = true
		if !openKeys[m.Key] {
			run.Opened++
		}
	}
	held := make(map[domain.PaymentID]domain.PaymentStatus, len(ours.Payments))
	for _, b := range ours.Payments {
		held[b.ID] = b.Status
	}
	for _, m := range got.Mismatches {
		if s := held[m.PaymentID]; m.Class == MissingInService && m.PaymentID != 0 &&
			(s == domain.PaymentPending || s == domain.PaymentAuthorized) {
			run.Lookups++
		}
	}
	for _, m := range got.Expected {
		found[m.Key] = true // still settling: neither a mismatch nor resolved
	}
	var candidates []Mismatch
	for _, item := range open {
		if !found[item.Key] {
			candidates = append(candidates, item.Mismatch)
		}
	}
	var closed []string
	for i, judged := range JudgedAgain(w, ours, theirs, candidates) {
		if judged {
			closed = append(closed, candidates[i].Key)
		}
	}

	run.Status = RunSucceeded
	run.Movements, run.Payouts = len(theirs.Movements), len(theirs.Payouts)
	run.Payments, run.Refunds = len(ours.Payments), len(ours.Refunds)
	run.Matched, run.Found, run.Expected = got.Matched, len(got.Mismatches), len(got.Expected)
	lookups, opened := run.Lookups, run.Opened
	run, err = uc.store.SaveRun(ctx, run, got.Mismatches, closed)
	if err != nil {
		return run, fmt.Errorf("keeping the run: %w", err)
	}
	run.Lookups, run.Opened = lookups, opened
	return run, nil
}

// refsNotHeld are the payment and refund refs that theirs' movements and
// open's items about our side name and ours does not hold.
func refsNotHeld(ours OurBooks, theirs ProviderBooks, open []ReconciliationItem) (paymentRefs, refundRefs []string) {
	payments := make(map[string]bool, len(ours.Payments))
	for _, p := range ours.Payments {
		payments[p.Ref] = true
	}
	refunds := make(map[string]bool, len(ours.Refunds))
	for _, f := range ours.Refunds {
		refunds[f.Ref] = true
	}
	wantPayment := func(ref string) {
		if ref != "" && !payments[ref] {
			payments[ref] = true
			paymentRefs = append(paymentRefs, ref)
		}
	}
	wantRefund := func(ref string) {
		if ref != "" && !refunds[ref] {
			refunds[ref] = true
			refundRefs = append(refundRefs, ref)
		}
	}
	for _, m := range theirs.Movements {
		wantPayment(m.PaymentRef)
		wantRefund(m.RefundRef)
	}
	for _, item := range open {
		switch item.Subject {
		case SubjectOurPayment:
			wantPayment(item.Ref)
		case SubjectOurRefund:
			wantRefund(item.Ref)
		}
	}
	return paymentRefs, refundRefs
}

// JudgedAgain reports, for each of open (mismatches an earlier run found),
// whether comparing ours and theirs over w judged its subject again: had
// the mismatch still stood, Reconcile would have found it. A mismatch so
// judged and not found is resolved; one whose subject the books do not
// hold (another window's movements, a record not read) is not judged,
// and stays as it was.
func JudgedAgain(w ReconcileWindow, ours OurBooks, theirs ProviderBooks, open []Mismatch) []bool {
	out := make([]bool, len(open))
	if len(open) == 0 {
		return out
	}
	want := map[MismatchSubject]map[string]bool{}
	for _, m := range open {
		id := m.Ref
		if m.Subject == SubjectMovement || m.Subject == SubjectPayout {
			id = m.ProviderID
		}
		if want[m.Subject] == nil {
			want[m.Subject] = map[string]bool{}
		}
		want[m.Subject][id] = false
	}
	mark := func(s MismatchSubject, id string) {
		if _, ok := want[s][id]; ok {
			want[s][id] = true
		}
	}
	// moved are our records of open items about our side that the
	// provider's movements name.
	moved := map[string]bool{}
	for _, m := range theirs.Movements {
		switch {
		case m.Category != CategoryRefund && m.Category != CategoryRefundFailure:
			mark(SubjectPayment, m.PaymentRef)
			if _, ok := want[SubjectOurPayment][m.PaymentRef]; ok {
				moved[m.PaymentRef] = true
			}
			if w.Fees != nil && m.Category == CategoryCharge {
				mark(SubjectMovement, m.ID)
			}
		case m.RefundRef != "":
			mark(SubjectRefund, m.RefundRef)
			if _, ok := want[SubjectOurRefund][m.RefundRef]; ok {
				moved[m.RefundRef] = true
			}
		default:
			mark(SubjectPaymentRefunds, m.PaymentRef)
		}
	}
	for _, p := range theirs.Payouts {
		mark(SubjectPayout, p.ID)
	}
	r := reconciler{w: w}
	// Our records: held, and for missing_at_provider also compared by it
	// (decided in the window and past the lag, or no longer SUCCEEDED
	// without the provider's movements: then it would have been found).
	ourPayments := map[string]BookedPayment{}
	for _, p := range ours.Payments {
		if _, ok := want[SubjectOurPayment][p.Ref]; ok {
			ourPayments[p.Ref] = p
		}
	}
	ourRefunds := map[string]BookedRefund{}
	for _, f := range ours.Refunds {
		if _, ok := want[SubjectOurRefund][f.Ref]; ok {
			ourRefunds[f.Ref] = f
		}
	}
	for i, m := range open {
		switch m.Subject {
		case SubjectOurPayment:
			p, ok := ourPayments[m.Ref]
			out[i] = ok && (m.Class != MissingAtProvider || p.Status != domain.PaymentSucceeded ||
				moved[m.Ref] || (r.inWindow(p.DecidedAt) && !r.settling(p.DecidedAt)))
		case SubjectOurRefund:
			f, ok := ourRefunds[m.Ref]
			out[i] = ok && (m.Class != MissingAtProvider || f.Status != domain.PaymentSucceeded ||
				moved[m.Ref] || (r.inWindow(f.DecidedAt) && !r.settling(f.DecidedAt)))
		case SubjectMovement, SubjectPayout:
			out[i] = want[m.Subject][m.ProviderID]
		default:
			out[i] = want[m.Subject][m.Ref]
		}
	}
	return out
}

// ReconciliationReader reads what the runs kept, for operators (the
// HTTP endpoints, the page, the metrics).
type ReconciliationReader interface {
	// Run returns the run with the id; ErrRunNotFound when there is none.
	Run(ctx context.Context, id int64) (ReconciliationRun, error)
	// Runs returns up to limit runs, the latest first, those before the
	// run before (0: from the latest).
	Runs(ctx context.Context, before int64, limit int) ([]ReconciliationRun, error)
	// Items returns up to limit items that filter selects, by id, those
	// after the item after.
	Items(ctx context.Context, filter ItemFilter, after int64, limit int) ([]ReconciliationItem, error)
	// Stats returns the open items' counts and amounts, and the last
	// successful run's time.
	Stats(ctx context.Context) (ReconciliationStats, error)
	// DayRun returns the latest successful run whose window holds the day
	// [day, day+24h) whole, or else the latest that holds part of it;
	// ErrRunNotFound when no run compared any of it.
	DayRun(ctx context.Context, day time.Time) (run ReconciliationRun, whole bool, err error)
}

// ItemFilter selects items; a zero field selects any.
type ItemFilter struct {
	// Open selects open (true) or closed (false) items; nil any.
	Open *bool
	// Class selects one class.
	Class MismatchClass
	// Currency selects the items where either side holds this currency.
	Currency string
	// Run selects the items the run found.
	Run int64
}

// ReconciliationStats are the open items at a glance.
type ReconciliationStats struct {
	// Open counts the open items by class (every class, zero included).
	Open map[MismatchClass]int
	// Unmatched is, by currency, what the open items leave unexplained:
	// the difference of the two sides' amounts (or the one side's, where
	// the other is in another currency or holds nothing).
	Unmatched map[string]decimal.Decimal
	// LastSuccess is when the last successful run was kept; zero if none
	// was.
	LastSuccess time.Time
}

// MismatchClasses are every class, in the order the operators' table
// lists them (docs/reconciliation.md).
var MismatchClasses = []MismatchClass{MissingInService, MissingAtProvider, AmountDiffers, CurrencyDiffers, StatusDiffers,
	MovedTwice, RefundsDiffer, PendingTooLong, HoldLapsing, BatchUnbalanced, FeeDiffers}
