package repository

import (
	"reflect"
	"testing"
)

func TestCompileNamed(t *testing.T) {
	t.Parallel()
	q := compileNamed(`SELECT @b, @a FROM t WHERE x = @b AND y = CAST(@c AS json) -- @b`)
	if want := `SELECT $1, $2 FROM t WHERE x = $1 AND y = CAST($3 AS json) -- $1`; q.text != want {
		t.Fatalf("text = %q, want %q", q.text, want)
	}
	args, err := q.args(map[string]any{"a": 1, "b": "two", "c": nil, "unused": true})
	if err != nil || !reflect.DeepEqual(args, []any{"two", 1, nil}) {
		t.Fatalf("args = %v, %v", args, err)
	}
	if _, err := q.args(map[string]any{"a": 1, "b": 2}); err == nil {
		t.Fatal("a missing parameter was not reported")
	}
}

// Every parameter of the hot path's statements gets a value from its
// caller: a test per statement runs it, and this one checks the names are
// the ones the callers set.
func TestHotPathStatementsCompile(t *testing.T) {
	t.Parallel()
	for name, q := range map[string]namedSQL{
		"lookupKeySQL":           lookupKeyStmt,
		"claimAndReserveSQL":     claimAndReserveStmt,
		"claimStepAndReserveSQL": claimStepAndReserveStmt,
		"recordOutcomeSQL":       recordOutcomeStmt,
	} {
		if len(q.names) == 0 || namedParameter.MatchString(q.text) {
			t.Errorf("%s compiled to %d parameters, text %q", name, len(q.names), q.text)
		}
	}
}
