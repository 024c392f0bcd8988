package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// modelDoc is the document whose model-to-code tables are checked.
const modelDoc = "docs/model.md"

// docs/model.md maps each step of the Promela models to the Go function
// and the SQL that implement it. A table that names a function renamed
// since sends its reader to nothing, so every table of the document with
// a "Go" column is checked against the code: each name in backticks in
// that column must exist (see checkModelTables), and each Go statement or
// clause the "SQL" column names (…SQL, …Clause, …Clauses) must be declared.
func TestModelTablesNameOnlyWhatExists(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, modelDoc))
	if err != nil {
		t.Fatal(err)
	}
	code, err := readCode(root)
	if err != nil {
		t.Fatal(err)
	}
	rows := modelTableRows(string(text))
	if len(rows) < 40 {
		t.Fatalf("%s: %d rows in tables with a Go column; the model-to-code tables are gone or unreadable", modelDoc, len(rows))
	}
	for _, problem := range checkModelTables(root, code, rows) {
		t.Error(problem)
	}
}

// The checker must be able to fail: a renamed method of an existing type,
// a function that no longer exists, a file that was removed, a renamed
// environment variable and a statement that is not declared each get a
// complaint; names that exist get none.
func TestModelTableCheckerCatchesRot(t *testing.T) {
	code, err := readCode(root)
	if err != nil {
		t.Fatal(err)
	}
	table := "| model step | Go | SQL |\n|---|---|---|\n" +
		"| a | `ChargeStore.LookupKey`, `settleFailedCall` (`internal/app/ports.go`) | `lookupKeySQL` |\n" +
		"| b | `PROVIDER_REQUEST_MAX_AGE`, `Keys.Lookup`, `IdempotentCommand.Handle` | `noSuchStatementSQL` |\n" +
		"| c | `app.SagaStepScope`, `internal/app/saga_steps.go`, `PROVIDER_MAX_REQUEST_AGE` | `recordOutcomeSQL` |\n"
	problems := checkModelTables(root, code, modelTableRows(table))
	want := []string{"ChargeStore.LookupKey", "settleFailedCall", "internal/app/ports.go", "PROVIDER_REQUEST_MAX_AGE", "noSuchStatementSQL"}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d: %q", len(problems), len(want), problems)
	}
	for i, name := range want {
		if !strings.Contains(problems[i], "`"+name+"`") {
			t.Errorf("problem %d is %q, want one about %s", i, problems[i], name)
		}
	}
}

// modelRow is one row of a model-to-code table: its Go and SQL cells.
type modelRow struct {
	line    int
	goCell  string
	sqlCell string
}

// modelTableRows reads every Markdown table whose header has a "Go"
// column.
func modelTableRows(text string) []modelRow {
	var rows []modelRow
	goCol, sqlCol := -1, -1
	inTable := false
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			inTable, goCol, sqlCol = false, -1, -1
			continue
		}
		cells := splitRow(line)
		switch {
		case !inTable:
			inTable = true
			goCol, sqlCol = slices.Index(cells, "Go"), slices.Index(cells, "SQL")
		case goCol < 0 || strings.Trim(line, "|-: ") == "":
			// not a model-to-code table, or the delimiter row
		default:
			r := modelRow{line: i + 1}
			if goCol < len(cells) {
				r.goCell = cells[goCol]
			}
			if sqlCol >= 0 && sqlCol < len(cells) {
				r.sqlCell = cells[sqlCol]
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// codeIndex is what the checks look names up in.
type codeIndex struct {
	// decls are the names the module's Go files declare (goDecls), across
	// packages.
	decls map[string]bool
	// packages are the module's package directory names (app, domain...).
	packages map[string]bool
	// words are the identifiers that occur in the module's Go, SQL and
	// Promela files: SQL clause names live in Go strings, model names in
	// model/*.pml, environment variables in internal/config.
	words map[string]bool
}

var word = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

func readCode(repo string) (codeIndex, error) {
	idx := codeIndex{decls: map[string]bool{}, packages: map[string]bool{}, words: map[string]bool{}}
	for _, dir := range []string{"internal", "cmd", "pkg", "db", "model"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			ext := filepath.Ext(p)
			if ext != ".go" && ext != ".sql" && ext != ".pml" {
				return nil
			}
			text, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own sources
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(text), -1) {
				idx.words[w] = true
			}
			if ext == ".go" {
				idx.packages[filepath.Base(filepath.Dir(p))] = true
				decls, err := goDecls(p)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				for n := range decls {
					idx.decls[n] = true
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			return codeIndex{}, err
		}
	}
	return idx, nil
}

var (
	goName    = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(?:\(\))?$`)
	envName   = regexp.MustCompile(`^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$`)
	sqlGoName = regexp.MustCompile(`^[a-z][A-Za-z0-9]*(?:SQL|Clause|Clauses)$`)
	pathName  = regexp.MustCompile(`^[a-z][A-Za-z0-9_./-]*/[A-Za-z0-9_.-]+$`)
)

// stdlibPackages are packages outside the module the tables may name.
var stdlibPackages = map[string]bool{"context": true, "errors": true, "time": true, "sql": true}

// checkModelTables checks the Go cell of each row: a name Type.Member must
// be declared as such (a method, a field, an interface method), and
// package.Name must name a declaration of one of the module's packages (or
// a standard package); a bare name must be declared or occur in the code
// (a SQL clause's name, a model's macro); an environment variable's name
// must occur in the code; a path must exist. Anything else in backticks
// (SQL, expressions, routes) is not a name and is left alone. In the SQL
// cell, a Go statement's or clause's name must be declared.
func checkModelTables(repo string, code codeIndex, rows []modelRow) []string {
	var problems []string
	complain := func(r modelRow, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: ", modelDoc, r.line)+fmt.Sprintf(format, args...))
	}
	for _, r := range rows {
		for _, m := range codeSpan.FindAllStringSubmatch(link.ReplaceAllString(r.goCell, ""), -1) {
			span := m[1]
			switch {
			case pathName.MatchString(span):
				if _, err := os.Stat(filepath.Join(repo, span)); err != nil {
					complain(r, "`%s` does not exist", span)
				}
			case envName.MatchString(span):
				if !code.words[span] {
					complain(r, "`%s` occurs nowhere in the code", span)
				}
			case goName.MatchString(span):
				g := goName.FindStringSubmatch(span)
				first, member := g[1], g[2]
				switch {
				case member == "":
					if !code.decls[first] && !code.words[first] {
						complain(r, "`%s` is declared nowhere and occurs nowhere in the code", span)
					}
				case code.decls[first+"."+member]:
				case stdlibPackages[first]:
				case code.packages[first] && code.decls[member]:
				default:
					complain(r, "`%s` is not declared (no such method, field or package member)", span)
				}
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(r.sqlCell, -1) {
			if span := m[1]; sqlGoName.MatchString(span) && !code.decls[span] {
				complain(r, "`%s` is not a declared statement or clause", span)
			}
		}
	}
	return problems
}
