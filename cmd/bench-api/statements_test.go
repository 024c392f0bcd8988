package main

import (
	"os"
	"testing"
)

// The labels of -statements find the hot path's statements in the text
// pg_stat_statements keeps, which is the text that runs: the statement
// files the service embeds (internal/repository/statements), comments and
// all, with $n for each @name.
func TestStatementLabelsNameTheChargesStatements(t *testing.T) {
	for file, label := range map[string]string{
		"key_lookup.sql":          "lookup (lookupKeySQL)",
		"charge_claim.sql":        "claim (claimAndReserveSQL)",
		"charge_step_claim.sql":   "a new saga step's claim (claimStepAndReserveSQL)",
		"charge_record.sql":       "record (recordOutcomeSQL)",
		"key_lock_still_held.sql": "lock check (lockStillHeldStmt)",
	} {
		b, err := os.ReadFile("../../internal/repository/statements/" + file) //nolint:gosec // G304: the repository's own statement files
		if err != nil {
			t.Fatal(err)
		}
		if got := statementLabel(string(b)); got != label {
			t.Errorf("%s is labelled %q, want %q", file, got, label)
		}
	}
	if got := statementLabel("SELECT 1"); got != "`SELECT 1`" {
		t.Errorf("another statement is labelled %q", got)
	}
}
