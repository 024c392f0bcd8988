package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/example/payment-service/internal/app"
)

// outcomeTable is the page whose outcome table states the outcome model.
const outcomeTable = "docs/design.md"

// The outcome table of docs/design.md is the outcome model: every row is
// what app.Settle answers, and every answer Settle can give for a call's
// answer, a lookup's and the timing has its row. The page and the code
// cannot say different things.
func TestTheOutcomeTableIsTheModel(t *testing.T) {
	body, err := os.ReadFile(filepath.Join(root, outcomeTable))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readOutcomeRows(string(body))
	if err != nil {
		t.Fatal(err)
	}
	covered := map[app.CallAnswers]bool{}
	for _, r := range rows {
		for _, a := range r.answers {
			if covered[a] {
				t.Errorf("%s: line %d: %s is covered twice", outcomeTable, r.line, describeAnswers(a))
			}
			covered[a] = true
			if got := app.Settle(a); got != r.want {
				t.Errorf("%s: line %d says %s for %s; Settle answers %s", outcomeTable, r.line, verdictText(r.want), describeAnswers(a), verdictText(got))
			}
		}
	}
	// Every combination the model is asked about has its row: a call's
	// answer, at each kind of provider; for a resumed refusal at a
	// provider that can be asked, the lookup's; after a lookup that found
	// nothing, the timing.
	for _, call := range []app.ProviderAnswer{app.AnswerApproved, app.AnswerDeclined, app.AnswerRefusedForGood, app.AnswerNotNow, app.AnswerUnknown,
		app.AnswerReceived, app.AnswerFailed} {
		for _, provider := range allProviders {
			for _, resumed := range []bool{false, true} {
				a := app.CallAnswers{Call: call, Resumed: resumed, Provider: provider}
				if !covered[a] {
					t.Errorf("%s: no row for %s", outcomeTable, describeAnswers(a))
				}
				if !resumed || provider == app.NotifiesOnly || (call != app.AnswerRefusedForGood && call != app.AnswerNotNow) {
					continue
				}
				for _, lookup := range []app.ProviderAnswer{app.AnswerApproved, app.AnswerDeclined, app.AnswerHoldsNothing, app.AnswerUnknown, app.AnswerFailed} {
					for _, mayLand := range []bool{false, true} {
						a := app.CallAnswers{Call: call, Resumed: true, Lookup: lookup, EarlierMayLand: mayLand, Provider: provider}
						if !covered[a] {
							t.Errorf("%s: no row for %s", outcomeTable, describeAnswers(a))
						}
					}
				}
			}
		}
	}
}

// The reader must be able to fail: a row with another action is caught,
// and so is a table with a row missing.
func TestOutcomeTableCheckCatchesAWrongRow(t *testing.T) {
	table := "| call | reservation | provider | lookup | earlier may land | the core |\n|---|---|---|---|---|---|\n" +
		"| approved | any | any | – | – | record DECLINED |\n"
	rows, err := readOutcomeRows(table)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0].answers) != 6 {
		t.Fatalf("rows = %+v", rows)
	}
	if got := app.Settle(rows[0].answers[0]); got == rows[0].want {
		t.Fatal("a wrong row agrees with Settle")
	}
	if _, err := readOutcomeRows("| call | reservation | provider | lookup | earlier may land | the core |\n|---|---|---|---|---|---|\n| approved | any | any | – | – | pray |\n"); err == nil {
		t.Fatal("an unknown action was read")
	}
}

type outcomeRow struct {
	line    int
	answers []app.CallAnswers // the combinations the row covers
	want    app.Verdict
}

var (
	answerWords = map[string]app.ProviderAnswer{
		"approved": app.AnswerApproved, "declined": app.AnswerDeclined, "refused for good": app.AnswerRefusedForGood,
		"not now": app.AnswerNotNow, "unknown": app.AnswerUnknown, "holds nothing": app.AnswerHoldsNothing,
		"not asked": app.AnswerNotAsked, "–": app.AnswerNotAsked, "received": app.AnswerReceived, "failed": app.AnswerFailed,
	}
	allProviders  = []app.Recovery{app.NotifiesOnly, app.LooksUp, app.LooksUpWithinBound}
	providerWords = map[string][]app.Recovery{
		"any": allProviders, "can be asked": {app.LooksUp, app.LooksUpWithinBound},
		"bounded": {app.LooksUpWithinBound}, "unbounded": {app.LooksUp}, "notifies only": {app.NotifiesOnly},
	}
	actionWords = map[string]app.Verdict{
		"record SUCCEEDED": {Action: app.RecordSettlement, Settlement: app.SettledApproved},
		"record DECLINED":  {Action: app.RecordSettlement, Settlement: app.SettledDeclined},
		"record FAILED":    {Action: app.RecordSettlement, Settlement: app.SettledFailed},
		"release":          {Action: app.ReleaseKey},
		"look up":          {Action: app.LookUpKey},
		"wait":             {Action: app.WaitForEarlier},
		"keep unknown":     {Action: app.KeepUnknown},
		"record received":  {Action: app.RecordReceived},
	}
)

// readOutcomeRows reads the table whose header is "| call | reservation |
// provider | lookup | earlier may land | the core |". "any" is fresh and
// resumed, or every kind of provider; "can be asked" is both kinds that
// can; "–" in the last column but one is either timing.
func readOutcomeRows(text string) ([]outcomeRow, error) {
	var rows []outcomeRow
	in := false
	for i, line := range strings.Split(text, "\n") {
		cells := tableCells(line)
		switch {
		case len(cells) == 6 && cells[0] == "call" && cells[5] == "the core":
			in = true
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		case len(cells) != 6:
			in = false
			continue
		}
		call, ok := answerWords[cells[0]]
		lookup, ok2 := answerWords[cells[3]]
		want, ok3 := actionWords[cells[5]]
		if !ok || !ok2 || !ok3 {
			return nil, fmt.Errorf("line %d: %q: a word the table does not use", i+1, line)
		}
		reservations := map[string][]bool{"fresh": {false}, "resumed": {true}, "any": {false, true}}[cells[1]]
		providers := providerWords[cells[2]]
		timings := map[string][]bool{"no": {false}, "yes": {true}, "–": {false, true}}[cells[4]]
		if reservations == nil || providers == nil || timings == nil {
			return nil, fmt.Errorf("line %d: %q: a reservation, provider or timing the table does not use", i+1, line)
		}
		r := outcomeRow{line: i + 1, want: want}
		for _, resumed := range reservations {
			for _, provider := range providers {
				for _, mayLand := range timings {
					a := app.CallAnswers{Call: call, Resumed: resumed, Lookup: lookup, EarlierMayLand: mayLand, Provider: provider}
					if lookup == app.AnswerNotAsked {
						// Before the lookup, the timing is not asked about.
						a.EarlierMayLand = false
						if mayLand {
							continue
						}
					}
					r.answers = append(r.answers, a)
				}
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no outcome table (| call | reservation | lookup | earlier may land | the core |)")
	}
	return rows, nil
}

// tableCells splits a Markdown table row into its trimmed cells.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

func verdictText(v app.Verdict) string {
	if v.Action == app.RecordSettlement {
		return "record " + string(v.Settlement.Status())
	}
	return v.Action.String()
}

func describeAnswers(a app.CallAnswers) string {
	s := "call " + a.Call.String()
	if a.Resumed {
		s += ", resumed"
	} else {
		s += ", fresh"
	}
	s += ", provider " + a.Provider.String()
	if a.Lookup != app.AnswerNotAsked {
		s += ", lookup " + a.Lookup.String()
		s += fmt.Sprintf(", earlier may land %v", a.EarlierMayLand)
	}
	return s
}
