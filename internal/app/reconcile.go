package app

import (
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/domain"
)

// Reconciliation compares the provider's books with ours over a window of
// time and says, item by item, where they disagree. Idempotency keeps one
// request from moving money twice; it cannot see what it never heard of: a
// charge whose answer was lost and whose event never came, a refund made
// by hand in the provider's dashboard, a capture the provider reversed, a
// record stuck PENDING. Reconcile is the whole comparison, a pure function
// like Settle, table-tested one row per class (reconcile_test.go); the job
// that feeds it and keeps what it finds is ReconcileBooks.
//
// Money is matched by our references: the provider key the service sent
// with each call rides in the provider's records (the sandbox's
// idempotency key; Stripe's metadata), so a movement names our payment,
// and a refund our refund. A movement without our reference was made
// outside the service.

// MovementCategory is what a movement at the provider is, in the words of
// Stripe's itemized payout reconciliation report (reporting_category).
type MovementCategory string

const (
	// CategoryCharge: money taken, by a one-step charge or a capture. A
	// capture's movement is the authorization's whole amount; what it did
	// not take comes back as a partial capture reversal.
	CategoryCharge MovementCategory = "charge"
	// CategoryPartialCaptureReversal: the part of an authorization that a
	// partial capture did not take, as a negative movement.
	CategoryPartialCaptureReversal MovementCategory = "partial_capture_reversal"
	// CategoryRefund: money given back, as a negative movement.
	CategoryRefund MovementCategory = "refund"
	// CategoryRefundFailure: a refund the provider made and then undid
	// (the card could not take it back), as a positive movement.
	CategoryRefundFailure MovementCategory = "refund_failure"
	// CategoryDispute: money the provider took back from us for a charge
	// (a chargeback, a reversal), as a negative movement.
	CategoryDispute MovementCategory = "dispute"
)

// ProviderMovement is one movement of money at the provider: a balance
// transaction, or a line of its report.
type ProviderMovement struct {
	// ID is the provider's id of the movement (balance_transaction_id).
	ID string
	// Category is what it is.
	Category MovementCategory
	// PaymentRef is our payment's provider key, as the provider carries
	// it (payment_metadata[provider_key]); empty when it carries none.
	PaymentRef string
	// RefundRef is our refund's provider key, for a refund's movement;
	// empty for any other, and for a refund made outside the service.
	RefundRef string
	// Gross is what moved, negative for money that left us; Fee what the
	// provider kept; Net is Gross less Fee.
	Gross, Fee, Net decimal.Decimal
	// Currency is the movement's currency, upper case.
	Currency string
	// Created is when the provider made it.
	Created time.Time
	// PayoutID is the payout batch it was paid out in; empty until then.
	PayoutID string
}

// Payout is a batch the provider paid out: the sum of its movements' net.
type Payout struct {
	// ID is the provider's id of the payout.
	ID string
	// Amount is what was paid out.
	Amount decimal.Decimal
	// Currency is Amount's.
	Currency string
	// Created is when the payout was made.
	Created time.Time
}

// ProviderBooks is the provider's side of a window.
type ProviderBooks struct {
	// Movements are the movements made in the window.
	Movements []ProviderMovement
	// Payouts are the payouts made in the window.
	Payouts []Payout
}

// BookedPayment is a payment as our books hold it.
type BookedPayment struct {
	// ID is the payment's id.
	ID domain.PaymentID
	// Ref is its provider key: how the provider knows it.
	Ref string
	// Status is where it stands.
	Status domain.PaymentStatus
	// Taken is what it took: the charge's amount, or what its capture
	// took; zero for a payment that took nothing.
	Taken decimal.Decimal
	// Currency is its currency.
	Currency string
	// CreatedAt is when it was reserved; DecidedAt when it reached the
	// status it has (for a captured payment, the capture).
	CreatedAt, DecidedAt time.Time
	// HoldExpiresAt is when an AUTHORIZED payment's hold lapses; zero
	// when not known.
	HoldExpiresAt time.Time
}

// BookedRefund is a refund as our books hold it.
type BookedRefund struct {
	// ID is the refund's id.
	ID domain.RefundID
	// Ref is its provider key, and PaymentRef its payment's.
	Ref, PaymentRef string
	// Status is where it stands.
	Status domain.RefundStatus
	// Amount is what it gives back.
	Amount decimal.Decimal
	// Currency is Amount's.
	Currency string
	// CreatedAt is when it was reserved; DecidedAt when it reached its
	// status.
	CreatedAt, DecidedAt time.Time
}

// OurBooks is our side: the payments and refunds decided in the window,
// and every one a movement of the window names, whenever it was decided.
type OurBooks struct {
	// Payments are the payments.
	Payments []BookedPayment
	// Refunds are the refunds.
	Refunds []BookedRefund
}

// ReconcileWindow is the stretch of time compared, and the bounds that
// tell a mismatch from what is on its way.
type ReconcileWindow struct {
	// From and To bound the window: movements made, and our records
	// decided, at From or later and before To.
	From, To time.Time
	// Now is when the comparison is made.
	Now time.Time
	// SettlementLag is how long the provider may take to show a movement
	// (and we to record a decision it made): within it of Now, a movement
	// or a record without its match is expected, not a mismatch.
	SettlementLag time.Duration
	// PendingBound is how long a record may stay PENDING before it is
	// reported.
	PendingBound time.Duration
	// HoldWarning is how long before its hold lapses an AUTHORIZED payment
	// is reported.
	HoldWarning time.Duration
	// Fees, when set, is the fee the contract says the provider keeps of a
	// charge: a movement whose fee differs is reported.
	Fees *FeePolicy
}

// FeePolicy is a contract's fee of a charge: a share of its gross plus a
// fixed part, rounded half away from zero to Places decimal places.
type FeePolicy struct {
	// Percent is the share, such as 2.9 for 2.9 %.
	Percent decimal.Decimal
	// Fixed is added to every charge's fee.
	Fixed decimal.Decimal
	// Places is how many decimal places a fee has (the currency's minor
	// unit: 2 for most).
	Places int32
}

// Fee is the fee the policy expects of a charge's gross.
func (f FeePolicy) Fee(gross decimal.Decimal) decimal.Decimal {
	return gross.Mul(f.Percent).Div(decimal.NewFromInt(100)).Add(f.Fixed).Round(f.Places)
}

// MismatchClass is the kind of a disagreement, and of what an operator
// does about it (docs/reconciliation.md).
type MismatchClass string

const (
	// MissingInService: the provider moved money we do not hold as done
	// (a lost answer whose event never came, a refund made in the
	// provider's dashboard). Handed to the completer's lookup.
	MissingInService MismatchClass = "missing_in_service"
	// MissingAtProvider: we hold as done what the provider does not show.
	MissingAtProvider MismatchClass = "missing_at_provider"
	// AmountDiffers: both hold it, for different amounts.
	AmountDiffers MismatchClass = "amount_differs"
	// CurrencyDiffers: both hold it, in different currencies.
	CurrencyDiffers MismatchClass = "currency_differs"
	// StatusDiffers: both hold it, and disagree on what it came to (we say
	// SUCCEEDED, it reversed; we say FAILED, it charged).
	StatusDiffers MismatchClass = "status_differs"
	// MovedTwice: the provider moved the same payment (or refund) twice.
	MovedTwice MismatchClass = "moved_twice"
	// RefundsDiffer: a payment's refunds, where the provider's carry no
	// reference of ours to match them one by one, add up differently.
	RefundsDiffer MismatchClass = "refunds_differ"
	// PendingTooLong: a record has been PENDING past the bound.
	PendingTooLong MismatchClass = "pending_too_long"
	// HoldLapsing: an authorization's hold lapses soon, nothing captured.
	HoldLapsing MismatchClass = "hold_lapsing"
	// BatchUnbalanced: a payout's movements do not add up to the payout.
	BatchUnbalanced MismatchClass = "batch_unbalanced"
	// FeeDiffers: the provider kept another fee than the contract's.
	FeeDiffers MismatchClass = "fee_differs"
)

// MismatchSubject is what a mismatch is about: what a run must have
// compared for its not finding the mismatch again to mean that it is
// resolved (JudgedAgain).
type MismatchSubject string

const (
	// SubjectPayment: a payment's movements at the provider (its charges,
	// reversals, disputes); Ref is the payment's.
	SubjectPayment MismatchSubject = "payment"
	// SubjectRefund: the movements at the provider that name our refund;
	// Ref is the refund's.
	SubjectRefund MismatchSubject = "refund"
	// SubjectPaymentRefunds: a payment's refunds at the provider that carry
	// no reference of ours; Ref is the payment's.
	SubjectPaymentRefunds MismatchSubject = "payment_refunds"
	// SubjectOurPayment: our payment as we hold it; Ref is its.
	SubjectOurPayment MismatchSubject = "our_payment"
	// SubjectOurRefund: our refund as we hold it; Ref is its.
	SubjectOurRefund MismatchSubject = "our_refund"
	// SubjectMovement: one movement (its fee); ProviderID is its id.
	SubjectMovement MismatchSubject = "movement"
	// SubjectPayout: one payout; ProviderID is its id.
	SubjectPayout MismatchSubject = "payout"
)

// Mismatch is one disagreement, with both sides' references and amounts.
type Mismatch struct {
	// Class is what kind it is.
	Class MismatchClass
	// Subject is what it is about.
	Subject MismatchSubject
	// Key identifies it across runs: the same disagreement found again by
	// a later run over an overlapping window has the same key.
	Key string
	// Ref is our provider key of what it is about (a payment's, or a
	// refund's); empty when the provider's movement carries none.
	Ref string
	// PaymentID is our payment's id, when we hold one.
	PaymentID domain.PaymentID
	// RefundID is our refund's id, when we hold one.
	RefundID domain.RefundID
	// ProviderID is the provider's id of the movement or payout.
	ProviderID string
	// Ours and Theirs are the amounts each side holds; zero where a side
	// holds nothing.
	Ours, Theirs decimal.Decimal
	// OurCurrency is Ours's currency.
	OurCurrency string
	// TheirCurrency is Theirs's.
	TheirCurrency string
	// Detail says what disagrees, for the operator.
	Detail string
}

// Reconciled is what Reconcile found.
type Reconciled struct {
	// Mismatches are the disagreements, in a stable order.
	Mismatches []Mismatch
	// Expected are the movements and records still inside the settlement
	// lag: not mismatches, and reported as such only if they stay.
	Expected []Mismatch
	// Matched counts the payments and refunds both sides agree on.
	Matched int
}

// Reconcile compares the provider's books with ours over w.
func Reconcile(w ReconcileWindow, ours OurBooks, theirs ProviderBooks) Reconciled {
	r := reconciler{w: w, payments: map[string]BookedPayment{}, refunds: map[string]BookedRefund{}, groupMatched: map[string]bool{}}
	for _, p := range ours.Payments {
		r.payments[p.Ref] = p
	}
	for _, f := range ours.Refunds {
		r.refunds[f.Ref] = f
	}
	byPayment := map[string][]ProviderMovement{}
	byRefund := map[string][]ProviderMovement{}
	unreferencedRefunds := map[string][]ProviderMovement{}
	for _, m := range theirs.Movements {
		switch {
		case m.Category == CategoryRefund || m.Category == CategoryRefundFailure:
			if m.RefundRef != "" {
				byRefund[m.RefundRef] = append(byRefund[m.RefundRef], m)
			} else {
				unreferencedRefunds[m.PaymentRef] = append(unreferencedRefunds[m.PaymentRef], m)
			}
		default:
			byPayment[m.PaymentRef] = append(byPayment[m.PaymentRef], m)
		}
	}
	for _, ref := range sortedKeys(byPayment) {
		r.payment(ref, byPayment[ref])
	}
	refundsMatched := map[string]bool{}
	for _, ref := range sortedKeys(byRefund) {
		refundsMatched[ref] = true
		r.refund(ref, byRefund[ref])
	}
	for _, ref := range sortedKeys(unreferencedRefunds) {
		r.unreferencedRefunds(ref, unreferencedRefunds[ref], refundsMatched)
	}
	r.ourSide(byPayment, refundsMatched)
	r.payouts(theirs)
	sort.Slice(r.out.Mismatches, func(i, j int) bool { return r.out.Mismatches[i].Key < r.out.Mismatches[j].Key })
	sort.Slice(r.out.Expected, func(i, j int) bool { return r.out.Expected[i].Key < r.out.Expected[j].Key })
	return r.out
}

type reconciler struct {
	w        ReconcileWindow
	payments map[string]BookedPayment
	refunds  map[string]BookedRefund
	// groupMatched are our refunds matched by a payment's unreferenced
	// refunds as a group.
	groupMatched map[string]bool
	out          Reconciled
}

// settling reports whether t is inside the settlement lag of now.
func (r *reconciler) settling(t time.Time) bool { return r.w.Now.Sub(t) < r.w.SettlementLag }

// inWindow reports whether t falls in the window.
func (r *reconciler) inWindow(t time.Time) bool { return !t.Before(r.w.From) && t.Before(r.w.To) }

func (r *reconciler) add(m Mismatch) { r.out.Mismatches = append(r.out.Mismatches, m) }

// mismatchKey is the key of a class's disagreement about what ids name.
func mismatchKey(class MismatchClass, ids ...string) string {
	key := string(class)
	for _, id := range ids {
		key += "|" + id
	}
	return key
}

// payment compares one payment's movements (charges, reversals, disputes)
// with the payment we hold under ref.
func (r *reconciler) payment(ref string, movements []ProviderMovement) {
	var charges []ProviderMovement
	taken := decimal.Zero
	reversed := false
	for _, m := range movements {
		switch m.Category {
		case CategoryCharge:
			charges = append(charges, m)
		case CategoryDispute:
			reversed = true
		}
		taken = taken.Add(m.Gross)
	}
	first := movements[0]
	if r.w.Fees != nil {
		for _, c := range charges {
			if want := r.w.Fees.Fee(c.Gross); !c.Fee.Equal(want) {
				r.add(Mismatch{Class: FeeDiffers, Subject: SubjectMovement, Key: mismatchKey(FeeDiffers, c.ID), Ref: ref, ProviderID: c.ID,
					Ours: want, Theirs: c.Fee, OurCurrency: c.Currency, TheirCurrency: c.Currency,
					Detail: fmt.Sprintf("fee %s of a charge of %s; the contract's is %s", c.Fee, c.Gross, want)})
			}
		}
	}
	p, held := r.payments[ref]
	mk := func(class MismatchClass, detail string) Mismatch {
		return Mismatch{Class: class, Subject: SubjectPayment, Key: mismatchKey(class, ref), Ref: ref, PaymentID: p.ID, ProviderID: first.ID,
			Ours: p.Taken, OurCurrency: p.Currency, Theirs: taken, TheirCurrency: first.Currency, Detail: detail}
	}
	switch {
	case len(charges) > 1:
		// The amounts differ too; the class that names the fault says so.
		m := mk(MovedTwice, fmt.Sprintf("%d charges at the provider for one payment (%s %s in all)", len(charges), taken, first.Currency))
		m.ProviderID = charges[1].ID
		r.add(m)
	case !held || p.Status == domain.PaymentPending || p.Status == domain.PaymentAuthorized:
		if len(charges) == 0 {
			return // a reversal of what we hold as pending: the charge's own line says more
		}
		what := "no payment of ours"
		if held {
			what = "our payment " + string(p.Status)
		}
		m := mk(MissingInService, fmt.Sprintf("the provider took %s %s; %s", taken, first.Currency, what))
		if r.settling(charges[0].Created) {
			r.out.Expected = append(r.out.Expected, m)
			return
		}
		r.add(m)
	case p.Status != domain.PaymentSucceeded:
		if taken.IsZero() {
			return // charged and given back in full by the provider: nothing moved
		}
		r.add(mk(StatusDiffers, fmt.Sprintf("we say %s; the provider took %s %s", p.Status, taken, first.Currency)))
	case reversed:
		r.add(mk(StatusDiffers, fmt.Sprintf("we say SUCCEEDED; the provider reversed it (%s %s left)", taken, first.Currency)))
	case p.Currency != first.Currency:
		r.add(mk(CurrencyDiffers, fmt.Sprintf("we hold %s %s; the provider %s %s", p.Taken, p.Currency, taken, first.Currency)))
	case !p.Taken.Equal(taken):
		r.add(mk(AmountDiffers, fmt.Sprintf("we hold %s taken; the provider took %s", p.Taken, taken)))
	default:
		r.out.Matched++
	}
}

// refund compares the movements that name our refund ref with it.
func (r *reconciler) refund(ref string, movements []ProviderMovement) {
	given := decimal.Zero
	made, failed := 0, false
	for _, m := range movements {
		given = given.Sub(m.Gross) // a refund's gross is negative
		if m.Category == CategoryRefund {
			made++
		} else {
			failed = true
		}
	}
	first := movements[0]
	f, held := r.refunds[ref]
	mk := func(class MismatchClass, detail string) Mismatch {
		return Mismatch{Class: class, Subject: SubjectRefund, Key: mismatchKey(class, ref), Ref: ref, RefundID: f.ID, ProviderID: first.ID,
			Ours: f.Amount, OurCurrency: f.Currency, Theirs: given, TheirCurrency: first.Currency, Detail: detail}
	}
	switch {
	case made > 1:
		r.add(mk(MovedTwice, fmt.Sprintf("%d refunds at the provider for one refund (%s %s in all)", made, given, first.Currency)))
	case !held || f.Status == domain.PaymentPending:
		if given.IsZero() {
			return
		}
		m := mk(MissingInService, fmt.Sprintf("the provider gave back %s %s under our refund's key; we hold it %s", given, first.Currency, orNone(held, f.Status)))
		if r.settling(first.Created) {
			r.out.Expected = append(r.out.Expected, m)
			return
		}
		r.add(m)
	case f.Status != domain.PaymentSucceeded:
		if given.IsZero() {
			return
		}
		r.add(mk(StatusDiffers, fmt.Sprintf("we say %s; the provider gave back %s %s", f.Status, given, first.Currency)))
	case failed:
		r.add(mk(StatusDiffers, fmt.Sprintf("we say SUCCEEDED; the provider's refund failed (%s %s given back)", given, first.Currency)))
	case f.Currency != first.Currency:
		r.add(mk(CurrencyDiffers, fmt.Sprintf("we hold %s %s; the provider %s %s", f.Amount, f.Currency, given, first.Currency)))
	case !f.Amount.Equal(given):
		r.add(mk(AmountDiffers, fmt.Sprintf("we hold %s given back; the provider gave back %s", f.Amount, given)))
	default:
		r.out.Matched++
	}
}

// unreferencedRefunds compares the refunds of payment ref that carry no
// reference of ours with our refunds of it not matched one by one: equal
// totals match as a group; refunds only at the provider are missing in
// the service; totals that differ are a payment's refunds adding up
// differently.
func (r *reconciler) unreferencedRefunds(ref string, movements []ProviderMovement, matched map[string]bool) {
	given := decimal.Zero
	for _, m := range movements {
		given = given.Sub(m.Gross)
	}
	first := movements[0]
	ours := decimal.Zero
	var ourRefs []string
	for _, f := range r.refunds {
		if f.PaymentRef == ref && f.Status == domain.PaymentSucceeded && !matched[f.Ref] {
			ours = ours.Add(f.Amount)
			ourRefs = append(ourRefs, f.Ref)
		}
	}
	p := r.payments[ref]
	m := Mismatch{Subject: SubjectPaymentRefunds, Key: ref, Ref: ref, PaymentID: p.ID, ProviderID: first.ID, Ours: ours, OurCurrency: p.Currency,
		Theirs: given, TheirCurrency: first.Currency}
	switch {
	case ours.Equal(given):
		for _, f := range ourRefs {
			r.groupMatched[f] = true
		}
		r.out.Matched++
	case ours.IsZero():
		m.Class, m.Detail = MissingInService, fmt.Sprintf("the provider gave back %s %s of our payment, under no refund of ours", given, first.Currency)
		m.Key = mismatchKey(MissingInService, ref, first.ID)
		if r.settling(first.Created) {
			r.out.Expected = append(r.out.Expected, m)
			return
		}
		r.add(m)
	default:
		for _, f := range ourRefs {
			r.groupMatched[f] = true
		}
		m.Class, m.Detail = RefundsDiffer, fmt.Sprintf("our refunds of the payment add up to %s; the provider's to %s", ours, given)
		m.Key = mismatchKey(RefundsDiffer, ref)
		r.add(m)
	}
}

// ourSide reports what our books hold and the provider does not show, and
// what our books hold for too long or about to lapse.
func (r *reconciler) ourSide(byPayment map[string][]ProviderMovement, refundsMatched map[string]bool) {
	for _, ref := range sortedKeys(r.payments) {
		p := r.payments[ref]
		mk := func(class MismatchClass, detail string) Mismatch {
			return Mismatch{Class: class, Subject: SubjectOurPayment, Key: mismatchKey(class, ref), Ref: ref, PaymentID: p.ID,
				Ours: p.Taken, OurCurrency: p.Currency, Detail: detail}
		}
		switch {
		case p.Status == domain.PaymentPending && r.w.Now.Sub(p.CreatedAt) >= r.w.PendingBound:
			r.add(mk(PendingTooLong, fmt.Sprintf("PENDING since %s", p.CreatedAt.UTC().Format(time.RFC3339))))
		case p.Status == domain.PaymentAuthorized && !p.HoldExpiresAt.IsZero() && p.HoldExpiresAt.Sub(r.w.Now) < r.w.HoldWarning:
			r.add(mk(HoldLapsing, fmt.Sprintf("its hold lapses at %s, nothing captured", p.HoldExpiresAt.UTC().Format(time.RFC3339))))
		case p.Status == domain.PaymentSucceeded && len(byPayment[ref]) == 0 && r.inWindow(p.DecidedAt):
			m := mk(MissingAtProvider, fmt.Sprintf("we hold %s %s taken; the provider shows nothing", p.Taken, p.Currency))
			if r.settling(p.DecidedAt) {
				r.out.Expected = append(r.out.Expected, m)
				continue
			}
			r.add(m)
		}
	}
	for _, ref := range sortedKeys(r.refunds) {
		f := r.refunds[ref]
		mk := func(class MismatchClass, detail string) Mismatch {
			return Mismatch{Class: class, Subject: SubjectOurRefund, Key: mismatchKey(class, ref), Ref: ref, RefundID: f.ID,
				Ours: f.Amount, OurCurrency: f.Currency, Detail: detail}
		}
		switch {
		case f.Status == domain.PaymentPending && r.w.Now.Sub(f.CreatedAt) >= r.w.PendingBound:
			r.add(mk(PendingTooLong, fmt.Sprintf("refund PENDING since %s", f.CreatedAt.UTC().Format(time.RFC3339))))
		case f.Status == domain.PaymentSucceeded && !refundsMatched[ref] && !r.groupMatched[ref] && r.inWindow(f.DecidedAt):
			m := mk(MissingAtProvider, fmt.Sprintf("we hold %s %s given back; the provider shows nothing", f.Amount, f.Currency))
			if r.settling(f.DecidedAt) {
				r.out.Expected = append(r.out.Expected, m)
				continue
			}
			r.add(m)
		}
	}
}

// payouts checks that each payout's movements add up to it.
func (r *reconciler) payouts(theirs ProviderBooks) {
	net := map[string]decimal.Decimal{}
	for _, m := range theirs.Movements {
		if m.PayoutID != "" {
			net[m.PayoutID] = net[m.PayoutID].Add(m.Net)
		}
	}
	for _, p := range theirs.Payouts {
		if sum := net[p.ID]; !sum.Equal(p.Amount) {
			r.add(Mismatch{Class: BatchUnbalanced, Subject: SubjectPayout, Key: mismatchKey(BatchUnbalanced, p.ID), ProviderID: p.ID,
				Ours: sum, OurCurrency: p.Currency, Theirs: p.Amount, TheirCurrency: p.Currency,
				Detail: fmt.Sprintf("the payout is %s; its movements' net adds up to %s", p.Amount, sum)})
		}
	}
}

func orNone(held bool, s domain.PaymentStatus) string {
	if !held {
		return "not at all"
	}
	return string(s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
