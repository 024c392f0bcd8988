package repository

import (
	"reflect"
	"testing"
)

// @name becomes $n, numbered by first use; an @name in a comment or a
// string literal stays text, since the statement files' comments name
// their parameters.
func TestCompileNamed(t *testing.T) {
	t.Parallel()
	q := compileNamed("-- @c first\nSELECT @b, @a, '@c', '' FROM t WHERE x = @b AND y = CAST(@c AS json) -- @b, @d")
	if want := "-- @c first\nSELECT $1, $2, '@c', '' FROM t WHERE x = $1 AND y = CAST($3 AS json) -- @b, @d"; q.text != want {
		t.Fatalf("text = %q, want %q", q.text, want)
	}
	if want := []string{"b", "a", "c"}; !reflect.DeepEqual(q.names, want) {
		t.Fatalf("names = %q, want %q", q.names, want)
	}
	args, err := q.args(map[string]any{"a": 1, "b": "two", "c": nil, "unused": true})
	if err != nil || !reflect.DeepEqual(args, []any{"two", 1, nil}) {
		t.Fatalf("args = %v, %v", args, err)
	}
	if _, err := q.args(map[string]any{"a": 1, "b": 2}); err == nil {
		t.Fatal("a missing parameter was not reported")
	}
}

// An empty statement file stops the package at start-up, not at its first
// use.
func TestCompileNamedRefusesAnEmptyStatement(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "\n", "-- only a comment\n"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%q compiled", text)
				}
			}()
			compileNamed(text)
		}()
	}
}

// Every statement file compiles to numbered parameters only: no @name is
// left outside its comments.
func TestStatementFilesCompile(t *testing.T) {
	t.Parallel()
	for file, text := range statementTexts {
		q := compileNamed(text)
		if again := compileNamed(q.text); len(again.names) != 0 {
			t.Errorf("%s: @%v left after compiling", file, again.names)
		}
	}
}
