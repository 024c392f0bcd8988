package main

import (
	"os"
	"strings"
	"testing"
)

// The labels of -statements find the hot path's statements in the text
// pg_stat_statements keeps, which is the text that runs: the generated
// copies in internal/repository/statements.
func TestStatementLabelsNameTheChargesStatements(t *testing.T) {
	b, err := os.ReadFile("../../internal/repository/statements/charge.sql")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lookupKeySQL":           "lookup (lookupKeySQL)",
		"claimAndReserveSQL":     "claim (claimAndReserveSQL)",
		"claimStepAndReserveSQL": "a new saga step's claim (claimStepAndReserveSQL)",
		"recordOutcomeSQL":       "record (recordOutcomeSQL)",
		"lockStillHeldStmt":      "lock check (lockStillHeldStmt)",
	}
	found := 0
	for _, block := range strings.Split(string(b), "\n\n-- ")[1:] {
		name, _, _ := strings.Cut(block, ":")
		label, ok := want[name]
		if !ok {
			continue
		}
		found++
		// The statement's text: the block without its comment lines.
		var text []string
		for line := range strings.SplitSeq(block, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") && !strings.HasPrefix(line, name+":") {
				text = append(text, line)
			}
		}
		if got := statementLabel(strings.Join(text, "\n")); got != label {
			t.Errorf("%s is labelled %q, want %q", name, got, label)
		}
	}
	if found != len(want) {
		t.Fatalf("found %d of the %d statements in charge.sql", found, len(want))
	}
	if got := statementLabel("SELECT 1"); got != "`SELECT 1`" {
		t.Errorf("another statement is labelled %q", got)
	}
}
