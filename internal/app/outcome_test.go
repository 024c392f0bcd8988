package app_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/example/payment-service/internal/app"
)

// The outcome table of docs/design.md, row by row (docs/outcome_test.go
// checks that the page states the same rows).
func TestSettleFollowsTheOutcomeTable(t *testing.T) {
	t.Parallel()
	record := func(s app.Settlement) app.Verdict { return app.Verdict{Action: app.RecordSettlement, Settlement: s} }
	act := func(a app.Action) app.Verdict { return app.Verdict{Action: a} }
	bounded, unbounded := app.LooksUpWithinBound, app.LooksUp
	tests := []struct {
		answers app.CallAnswers
		want    app.Verdict
	}{
		// A decision is recorded, fresh or resumed, at any provider.
		{app.CallAnswers{Call: app.AnswerApproved}, record(app.SettledApproved)},
		{app.CallAnswers{Call: app.AnswerDeclined}, record(app.SettledDeclined)},
		{app.CallAnswers{Call: app.AnswerApproved, Resumed: true}, record(app.SettledApproved)},
		{app.CallAnswers{Call: app.AnswerDeclined, Resumed: true, Provider: bounded}, record(app.SettledDeclined)},
		// A refusal of a fresh reservation is the whole truth.
		{app.CallAnswers{Call: app.AnswerRefusedForGood}, record(app.SettledFailed)},
		{app.CallAnswers{Call: app.AnswerNotNow, Provider: unbounded}, act(app.ReleaseKey)},
		// A refusal of a resumed reservation asks the provider's record,
		// where the provider can be asked.
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded}, act(app.LookUpKey)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: unbounded}, act(app.LookUpKey)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: app.NotifiesOnly}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: app.NotifiesOnly}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded, Lookup: app.AnswerApproved}, record(app.SettledApproved)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: unbounded, Lookup: app.AnswerDeclined}, record(app.SettledDeclined)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: bounded, Lookup: app.AnswerApproved}, record(app.SettledApproved)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: unbounded, Lookup: app.AnswerDeclined}, record(app.SettledDeclined)},
		// Nothing under the key is a proof only at a provider that refuses
		// late requests, once none can land.
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded, Lookup: app.AnswerHoldsNothing}, record(app.SettledFailed)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded, Lookup: app.AnswerHoldsNothing, EarlierMayLand: true}, act(app.WaitForEarlier)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: unbounded, Lookup: app.AnswerHoldsNothing}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: bounded, Lookup: app.AnswerHoldsNothing}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded, Lookup: app.AnswerUnknown}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: unbounded, Lookup: app.AnswerUnknown}, act(app.KeepUnknown)},
		// A modification received is recorded as such, the reservation
		// kept for the provider's event; its failure is a decision.
		{app.CallAnswers{Call: app.AnswerReceived}, act(app.RecordReceived)},
		{app.CallAnswers{Call: app.AnswerReceived, Resumed: true, Provider: bounded}, act(app.RecordReceived)},
		{app.CallAnswers{Call: app.AnswerFailed}, record(app.SettledFailed)},
		{app.CallAnswers{Call: app.AnswerFailed, Resumed: true, Provider: unbounded}, record(app.SettledFailed)},
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: unbounded, Lookup: app.AnswerFailed}, record(app.SettledFailed)},
		{app.CallAnswers{Call: app.AnswerRefusedForGood, Resumed: true, Provider: bounded, Lookup: app.AnswerFailed, EarlierMayLand: true}, record(app.SettledFailed)},
		// A lookup that finds it received, not decided, knows nothing new.
		{app.CallAnswers{Call: app.AnswerNotNow, Resumed: true, Provider: bounded, Lookup: app.AnswerReceived}, act(app.KeepUnknown)},
		// Everything else is unknown.
		{app.CallAnswers{Call: app.AnswerUnknown}, act(app.KeepUnknown)},
		{app.CallAnswers{Call: app.AnswerUnknown, Resumed: true, Provider: bounded}, act(app.KeepUnknown)},
	}
	for _, tc := range tests {
		t.Run(describe(tc.answers), func(t *testing.T) {
			t.Parallel()
			if got := app.Settle(tc.answers); got != tc.want {
				t.Errorf("Settle = %v %s, want %v %s", got.Action, got.Settlement, tc.want.Action, tc.want.Settlement)
			}
		})
	}
}

// Over every combination of answers and providers, the model keeps the
// rules that make it safe, whichever row a change touches: an unknown
// outcome never gives the key back; a resumed reservation is never
// released, and never FAILED while an earlier request may land, before the
// provider's record was asked, or at a provider whose "nothing" proves
// nothing; a provider that cannot be asked is never looked up; a refusal
// for now is never FAILED.
func TestSettleNeverGuesses(t *testing.T) {
	t.Parallel()
	answers := []app.ProviderAnswer{app.AnswerNotAsked, app.AnswerApproved, app.AnswerDeclined, app.AnswerRefusedForGood,
		app.AnswerNotNow, app.AnswerHoldsNothing, app.AnswerUnknown, app.AnswerReceived, app.AnswerFailed}
	for _, call := range answers[1:] {
		for _, lookup := range answers {
			for _, provider := range []app.Recovery{app.NotifiesOnly, app.LooksUp, app.LooksUpWithinBound} {
				for _, resumed := range []bool{false, true} {
					for _, mayLand := range []bool{false, true} {
						a := app.CallAnswers{Call: call, Resumed: resumed, Lookup: lookup, EarlierMayLand: mayLand, Provider: provider}
						v := app.Settle(a)
						failed := v.Action == app.RecordSettlement && v.Settlement == app.SettledFailed
						// The provider's own decision that a received
						// modification failed is its word, not a guess.
						saidFailed := call == app.AnswerFailed || lookup == app.AnswerFailed
						switch {
						case v.Action == 0:
							t.Errorf("%s: no action", describe(a))
						case call == app.AnswerUnknown && v.Action != app.KeepUnknown:
							t.Errorf("%s: %v; an unknown call keeps everything", describe(a), v.Action)
						case resumed && v.Action == app.ReleaseKey:
							t.Errorf("%s: a resumed reservation released", describe(a))
						case resumed && failed && !saidFailed && (mayLand || lookup != app.AnswerHoldsNothing || provider != app.LooksUpWithinBound):
							t.Errorf("%s: FAILED without the provider's word that nothing is or can be made", describe(a))
						case provider == app.NotifiesOnly && v.Action == app.LookUpKey:
							t.Errorf("%s: a provider that cannot be asked is looked up", describe(a))
						case call == app.AnswerNotNow && failed && !saidFailed:
							t.Errorf("%s: a refusal for now recorded FAILED", describe(a))
						case v.Action == app.RecordSettlement && !failed && call != app.AnswerApproved && call != app.AnswerDeclined &&
							lookup != app.AnswerApproved && lookup != app.AnswerDeclined:
							t.Errorf("%s: %s recorded with no decision", describe(a), v.Settlement)
						case (v.Action == app.RecordReceived) != (call == app.AnswerReceived):
							t.Errorf("%s: %v; a receipt is recorded when, and only when, the call answered one", describe(a), v.Action)
						}
					}
				}
			}
		}
	}
}

func TestAnswerOfSortsEveryResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		decision app.ProviderDecision
		err      error
		want     app.ProviderAnswer
	}{
		{app.ProviderApproved, nil, app.AnswerApproved},
		{app.ProviderDeclined, nil, app.AnswerDeclined},
		{app.ProviderFailed, nil, app.AnswerFailed},
		{app.ProviderReceived, nil, app.AnswerReceived},
		{"", fmt.Errorf("422: %w", app.ErrProviderRefused), app.AnswerRefusedForGood},
		{"", fmt.Errorf("503: %w", app.ErrProviderNotCharged), app.AnswerNotNow},
		{"", fmt.Errorf("404: %w", app.ErrNoProviderCharge), app.AnswerHoldsNothing},
		{"", fmt.Errorf("timeout: %w", app.ErrProviderOutcomeUnknown), app.AnswerUnknown},
		{"", errors.New("an error the adapter did not sort"), app.AnswerUnknown},
		{"PENDING", nil, app.AnswerUnknown},
	} {
		if got := app.AnswerOf(tc.decision, tc.err); got != tc.want {
			t.Errorf("AnswerOf(%q, %v) = %s, want %s", tc.decision, tc.err, got, tc.want)
		}
	}
}

func describe(a app.CallAnswers) string {
	s := fmt.Sprintf("call %s", a.Call)
	if a.Resumed {
		s += ", resumed"
	}
	if a.Lookup != app.AnswerNotAsked {
		s += ", lookup " + a.Lookup.String()
	}
	if a.EarlierMayLand {
		s += ", earlier may land"
	}
	return s + ", provider " + a.Provider.String()
}
