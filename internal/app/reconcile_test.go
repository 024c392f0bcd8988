package app_test

import (
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/example/payment-service/internal/app"
	"github.com/example/payment-service/internal/domain"
)

// The books of one clean day, and each fault a day can hold, one row per
// class: each fault yields exactly its class and nothing else, and the
// clean day nothing at all.

var (
	reconcileNow = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	dayStart     = reconcileNow.Add(-24 * time.Hour)
	decided      = reconcileNow.Add(-6 * time.Hour) // well past the settlement lag
)

func money(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// cleanDay: a one-step charge of 100.00, refunded 40.00; an authorization
// of 50.00 captured for 30.00 (the provider shows the 50.00 and a reversal
// of 20.00); a payout of every movement's net.
func cleanDay() (app.OurBooks, app.ProviderBooks) {
	ours := app.OurBooks{
		Payments: []app.BookedPayment{
			{ID: 1, Ref: "sandbox:pi_a", Status: domain.PaymentSucceeded, Taken: money("100"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided},
			{ID: 2, Ref: "sandbox:pi_b", Status: domain.PaymentSucceeded, Taken: money("30"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided},
		},
		Refunds: []app.BookedRefund{
			{ID: 1, Ref: "refund:sandbox:re_a", PaymentRef: "sandbox:pi_a", Status: domain.PaymentSucceeded, Amount: money("40"), Currency: "RUB",
				CreatedAt: decided, DecidedAt: decided},
		},
	}
	theirs := app.ProviderBooks{
		Movements: []app.ProviderMovement{
			movement("txn_a", app.CategoryCharge, "sandbox:pi_a", "", "100", "3.00"),
			movement("txn_b", app.CategoryCharge, "sandbox:pi_b", "", "50", "1.50"),
			movement("txn_b_rev", app.CategoryPartialCaptureReversal, "sandbox:pi_b", "", "-20", "0"),
			movement("txn_re_a", app.CategoryRefund, "sandbox:pi_a", "refund:sandbox:re_a", "-40", "0"),
		},
	}
	total := decimal.Zero
	for i := range theirs.Movements {
		theirs.Movements[i].PayoutID = "po_1"
		total = total.Add(theirs.Movements[i].Net)
	}
	theirs.Payouts = []app.Payout{{ID: "po_1", Amount: total, Currency: "RUB", Created: reconcileNow.Add(-time.Hour)}}
	return ours, theirs
}

func movement(id string, c app.MovementCategory, paymentRef, refundRef, gross, fee string) app.ProviderMovement {
	g, f := money(gross), money(fee)
	return app.ProviderMovement{ID: id, Category: c, PaymentRef: paymentRef, RefundRef: refundRef,
		Gross: g, Fee: f, Net: g.Sub(f), Currency: "RUB", Created: decided}
}

func window() app.ReconcileWindow {
	return app.ReconcileWindow{From: dayStart, To: reconcileNow, Now: reconcileNow,
		SettlementLag: time.Hour, PendingBound: 12 * time.Hour, HoldWarning: 24 * time.Hour}
}

func TestReconcileFindsEachFaultAsItsClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault func(w *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks)
		want  []app.MismatchClass
		// expected are the classes of what is still inside the lag.
		expected []app.MismatchClass
	}{
		{name: "a clean day", fault: func(*app.ReconcileWindow, *app.OurBooks, *app.ProviderBooks) {}},
		{name: "a lost answer, the provider charged: missing in the service",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 3, Ref: "sandbox:pi_lost", Status: domain.PaymentPending,
					Taken: money("0"), Currency: "RUB", CreatedAt: decided})
				theirs.Movements = append(theirs.Movements, movement("txn_lost", app.CategoryCharge, "sandbox:pi_lost", "", "70", "0"))
			},
			want: []app.MismatchClass{app.MissingInService}},
		{name: "a refund made at the provider only: missing in the service",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements = append(theirs.Movements, movement("txn_dash", app.CategoryRefund, "sandbox:pi_a", "", "-10", "0"))
			},
			want: []app.MismatchClass{app.MissingInService}},
		{name: "a charge we hold that the provider does not show: missing at the provider",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 4, Ref: "sandbox:pi_ghost", Status: domain.PaymentSucceeded,
					Taken: money("15"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided})
			},
			want: []app.MismatchClass{app.MissingAtProvider}},
		{name: "a refund we hold that the provider does not show: missing at the provider",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				ours.Refunds = append(ours.Refunds, app.BookedRefund{ID: 2, Ref: "refund:sandbox:re_ghost", PaymentRef: "sandbox:pi_a",
					Status: domain.PaymentSucceeded, Amount: money("5"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided})
			},
			want: []app.MismatchClass{app.MissingAtProvider}},
		{name: "an amount the provider changed",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements[0].Gross, theirs.Movements[0].Net = money("90"), money("87")
				theirs.Payouts[0].Amount = theirs.Payouts[0].Amount.Sub(money("10"))
			},
			want: []app.MismatchClass{app.AmountDiffers}},
		{name: "a refund's amount the provider changed",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements[3].Gross, theirs.Movements[3].Net = money("-45"), money("-45")
				theirs.Payouts[0].Amount = theirs.Payouts[0].Amount.Sub(money("5"))
			},
			want: []app.MismatchClass{app.AmountDiffers}},
		{name: "a currency the provider changed",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements[0].Currency = "EUR"
			},
			want: []app.MismatchClass{app.CurrencyDiffers}},
		{name: "we say FAILED, it charged",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 5, Ref: "sandbox:pi_failed", Status: domain.PaymentFailed,
					Taken: money("0"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided})
				theirs.Movements = append(theirs.Movements, movement("txn_failed", app.CategoryCharge, "sandbox:pi_failed", "", "25", "0"))
			},
			want: []app.MismatchClass{app.StatusDiffers}},
		{name: "we say SUCCEEDED, it reversed the charge",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements = append(theirs.Movements, movement("txn_dispute", app.CategoryDispute, "sandbox:pi_a", "", "-100", "15"))
			},
			want: []app.MismatchClass{app.StatusDiffers}},
		{name: "we say a refund SUCCEEDED, the provider's failed",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Movements = append(theirs.Movements, movement("txn_re_fail", app.CategoryRefundFailure, "sandbox:pi_a", "refund:sandbox:re_a", "40", "0"))
			},
			want: []app.MismatchClass{app.StatusDiffers}},
		{name: "the same payment moved twice",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				dup := theirs.Movements[0]
				dup.ID, dup.PayoutID = "txn_a_again", "" // not paid out yet
				theirs.Movements = append(theirs.Movements, dup)
			},
			want: []app.MismatchClass{app.MovedTwice}},
		{name: "the same refund made twice",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				dup := theirs.Movements[3]
				dup.ID, dup.PayoutID = "txn_re_a_again", ""
				theirs.Movements = append(theirs.Movements, dup)
			},
			want: []app.MismatchClass{app.MovedTwice}},
		{name: "a payment's refunds, without our references, add up differently",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks) {
				ours.Refunds = append(ours.Refunds,
					app.BookedRefund{ID: 3, Ref: "refund:sandbox:re_b1", PaymentRef: "sandbox:pi_b", Status: domain.PaymentSucceeded,
						Amount: money("10"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided},
					app.BookedRefund{ID: 4, Ref: "refund:sandbox:re_b2", PaymentRef: "sandbox:pi_b", Status: domain.PaymentSucceeded,
						Amount: money("10"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided})
				theirs.Movements = append(theirs.Movements, movement("txn_b_re", app.CategoryRefund, "sandbox:pi_b", "", "-25", "0"))
			},
			want: []app.MismatchClass{app.RefundsDiffer}},
		{name: "a payment's refunds, without our references, that add up: matched as a group",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks) {
				ours.Refunds = append(ours.Refunds,
					app.BookedRefund{ID: 3, Ref: "refund:sandbox:re_b1", PaymentRef: "sandbox:pi_b", Status: domain.PaymentSucceeded,
						Amount: money("10"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided},
					app.BookedRefund{ID: 4, Ref: "refund:sandbox:re_b2", PaymentRef: "sandbox:pi_b", Status: domain.PaymentSucceeded,
						Amount: money("10"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided})
				theirs.Movements = append(theirs.Movements, movement("txn_b_re", app.CategoryRefund, "sandbox:pi_b", "", "-20", "0"))
			}},
		{name: "a record PENDING past the bound",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 6, Ref: "sandbox:pi_stuck", Status: domain.PaymentPending,
					Taken: money("0"), Currency: "RUB", CreatedAt: reconcileNow.Add(-13 * time.Hour)})
			},
			want: []app.MismatchClass{app.PendingTooLong}},
		{name: "a refund PENDING past the bound",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				ours.Refunds = append(ours.Refunds, app.BookedRefund{ID: 5, Ref: "refund:sandbox:re_stuck", PaymentRef: "sandbox:pi_a",
					Status: domain.PaymentPending, Amount: money("5"), Currency: "RUB", CreatedAt: reconcileNow.Add(-13 * time.Hour)})
			},
			want: []app.MismatchClass{app.PendingTooLong}},
		{name: "a hold about to lapse",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 7, Ref: "sandbox:pi_held", Status: domain.PaymentAuthorized,
					Taken: money("0"), Currency: "RUB", CreatedAt: decided, DecidedAt: decided, HoldExpiresAt: reconcileNow.Add(2 * time.Hour)})
			},
			want: []app.MismatchClass{app.HoldLapsing}},
		{name: "a batch whose items do not add up to its payout",
			fault: func(_ *app.ReconcileWindow, _ *app.OurBooks, theirs *app.ProviderBooks) {
				theirs.Payouts[0].Amount = theirs.Payouts[0].Amount.Add(money("0.01"))
			},
			want: []app.MismatchClass{app.BatchUnbalanced}},
		{name: "a fee other than the contract's",
			fault: func(w *app.ReconcileWindow, _ *app.OurBooks, _ *app.ProviderBooks) {
				// 3 % of the gross: 3.00 of 100.00 as charged, 1.50 of 50.00
				// expected; the provider kept 1.50 of 50.00, so only a
				// contract of 2.9 % + 0.05 disagrees on the first.
				w.Fees = &app.FeePolicy{Percent: money("2.9"), Fixed: money("0.05"), Places: 2}
			},
			want: []app.MismatchClass{app.FeeDiffers}},
		{name: "fees as the contract says",
			fault: func(w *app.ReconcileWindow, _ *app.OurBooks, _ *app.ProviderBooks) {
				w.Fees = &app.FeePolicy{Percent: money("3"), Places: 2}
			}},
		{name: "a charge still inside the settlement lag: expected, not a mismatch",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, theirs *app.ProviderBooks) {
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 8, Ref: "sandbox:pi_fresh", Status: domain.PaymentPending,
					Taken: money("0"), Currency: "RUB", CreatedAt: reconcileNow.Add(-time.Minute)})
				m := movement("txn_fresh", app.CategoryCharge, "sandbox:pi_fresh", "", "12", "0")
				m.Created = reconcileNow.Add(-time.Minute)
				theirs.Movements = append(theirs.Movements, m)
			},
			expected: []app.MismatchClass{app.MissingInService}},
		{name: "a charge we recorded that the provider does not show yet: expected",
			fault: func(_ *app.ReconcileWindow, ours *app.OurBooks, _ *app.ProviderBooks) {
				at := reconcileNow.Add(-time.Minute)
				ours.Payments = append(ours.Payments, app.BookedPayment{ID: 9, Ref: "sandbox:pi_new", Status: domain.PaymentSucceeded,
					Taken: money("12"), Currency: "RUB", CreatedAt: at, DecidedAt: at})
			},
			expected: []app.MismatchClass{app.MissingAtProvider}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := window()
			ours, theirs := cleanDay()
			tc.fault(&w, &ours, &theirs)
			got := app.Reconcile(w, ours, theirs)
			if classes := classesOf(got.Mismatches); !slices.Equal(classes, tc.want) {
				t.Errorf("mismatches %v, want %v: %+v", classes, tc.want, got.Mismatches)
			}
			if classes := classesOf(got.Expected); !slices.Equal(classes, tc.expected) {
				t.Errorf("expected %v, want %v: %+v", classes, tc.expected, got.Expected)
			}
			for _, m := range got.Mismatches {
				if m.Key == "" || m.Detail == "" || m.Subject == "" {
					t.Errorf("a mismatch without its key, its subject or its detail: %+v", m)
				}
			}
			// What it finds it judged: a later run over the same books,
			// finding it again, would have closed it had it gone; a run
			// over books without its subject judges nothing.
			for i, judged := range app.JudgedAgain(w, ours, theirs, got.Mismatches) {
				if !judged {
					t.Errorf("found but not judged: %+v", got.Mismatches[i])
				}
			}
			for i, judged := range app.JudgedAgain(w, app.OurBooks{}, app.ProviderBooks{}, got.Mismatches) {
				if judged {
					t.Errorf("judged over empty books: %+v", got.Mismatches[i])
				}
			}
			// The same books give the same items, keyed alike: a window run
			// again finds what it found.
			again := app.Reconcile(w, ours, theirs)
			if !slices.EqualFunc(again.Mismatches, got.Mismatches, func(a, b app.Mismatch) bool { return a.Key == b.Key }) {
				t.Errorf("a second run found %+v, the first %+v", again.Mismatches, got.Mismatches)
			}
		})
	}
}

func classesOf(ms []app.Mismatch) []app.MismatchClass {
	var out []app.MismatchClass
	for _, m := range ms {
		out = append(out, m.Class)
	}
	slices.Sort(out)
	return out
}
