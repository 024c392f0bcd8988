// Package docs_test keeps the documentation true to the code it points at.
//
// docs/idempotency.md maps every rule of the idempotency style guide to the
// code that implements it and the tests that prove it. The map is only
// worth reading while it names what exists, so these tests parse it and fail
// when a linked file, a named function or a named test is gone or renamed.
// They also check that every relative link in the README and under docs/
// leads to a file (and heading) that exists, and that each decision record
// has its date and its three sections.
package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's directory.
const root = ".."

// ruleMap is the document whose table the tests check, relative to root.
const ruleMap = "docs/idempotency.md"

// The columns of the rule map, as its header names them.
const (
	colRule     = "Rule"
	colCode     = "Where in the code"
	colProof    = "Proved by"
	colDemands  = "What it demands"
	colPrevents = "The failure it prevents"
)

// requiredRules must each have a row: the style guide's rules and the
// producer setting it names.
var requiredRules = []string{
	"R-DIST-IDEM-1", "R-DIST-IDEM-2", "R-DIST-IDEM-3", "R-DIST-IDEM-4", "R-DIST-IDEM-5",
	"R-DIST-IDEM-X1", "R-DIST-IDEM-X2", "R-DIST-IDEM-X3", "R-KFK-PROD-1",
}

func TestRuleMapNamesOnlyWhatExists(t *testing.T) {
	rows, err := readRuleMap(filepath.Join(root, ruleMap))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no rows in the rule table", ruleMap)
	}
	for _, problem := range checkRows(root, filepath.Dir(ruleMap), rows) {
		t.Error(problem)
	}
}

func TestRuleMapHasARowPerRule(t *testing.T) {
	rows, err := readRuleMap(filepath.Join(root, ruleMap))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range requiredRules {
		found := false
		for _, r := range rows {
			if slices.Contains(ruleIDs(r.cells[colRule]), id) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no row for %s", ruleMap, id)
		}
	}
}

// The checker must be able to fail: a row that names a missing file, a
// missing function and a missing test gets one complaint for each, and a
// row naming what exists gets none.
func TestRuleMapCheckerCatchesRot(t *testing.T) {
	table := strings.Join([]string{
		"| Rule | What it demands | Where in the code | Proved by | The failure it prevents |",
		"|---|---|---|---|---|",
		"| R-DIST-IDEM-3 | a key | [charges.go](../internal/repository/charges.go): `claimAndReserveSQL`, `ChargeStore.Claim` | [idempotency_test.go](../internal/repository/idempotency_test.go): `TestClaimIsAtomicUnderConcurrency` | double charge |",
		"| R-BOGUS-1 | nothing | [gone.go](../internal/gone.go): `Gone`; [charges.go](../internal/repository/charges.go): `noSuchFunction` | [idempotency_test.go](../internal/repository/idempotency_test.go): `TestNoSuchTest` | rot |",
		"| R-BOGUS-2 | nothing | `Unlinked` | [idempotency_test.go](../internal/repository/idempotency_test.go): `claimAndReserveSQL` | rot |",
	}, "\n")
	rows, err := parseRuleTable(table)
	if err != nil {
		t.Fatal(err)
	}
	problems := checkRows(root, "docs", rows)
	want := []string{
		"R-BOGUS-1: ../internal/gone.go does not exist",
		"R-BOGUS-1: `Gone` is declared in none of",
		"R-BOGUS-1: `noSuchFunction` is declared in none of",
		"R-BOGUS-1: test `TestNoSuchTest` is declared in none of",
		"R-BOGUS-2: `Unlinked` is declared in none of", // no file linked: nothing declares it
		"R-BOGUS-2: `claimAndReserveSQL` is not a test function",
	}
	if len(problems) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("no problem starting %q in:\n%s", w, strings.Join(problems, "\n"))
		}
	}
}

// Every relative link in the README and in docs/ (decision records
// included) leads to a file that exists, and a link to a heading of a
// Markdown file to a heading that exists, as the code host names it.
func TestRelativeLinksResolve(t *testing.T) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f)) //nolint:gosec // G304: the repository's own docs
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range markdownLinks(string(text)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			path := filepath.Join(root, filepath.Dir(f), target)
			if target == "" {
				path = filepath.Join(root, f)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %q: %v", f, link, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") {
				body, err := os.ReadFile(path) //nolint:gosec // G304: a file of the repository a doc links
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(headingAnchors(string(body)), anchor) {
					t.Errorf("%s: link %q: no heading with anchor #%s in %s", f, link, anchor, target)
				}
			}
		}
	}
}

// Every decision record is numbered, dated, and says what it was about,
// what was decided and what follows.
func TestDecisionRecordsAreComplete(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(root, "docs", "decisions", "[0-9][0-9][0-9][0-9]-*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no decision records in docs/decisions")
	}
	date := regexp.MustCompile(`(?m)^Date: \d{4}-\d{2}-\d{2}$`)
	for _, p := range paths {
		text, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own decision records
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p)
		if !strings.HasPrefix(string(text), "# "+name[:4]+". ") {
			t.Errorf("%s: the title must start with %q", name, "# "+name[:4]+". ")
		}
		if !date.Match(text) {
			t.Errorf("%s: no line %q", name, "Date: YYYY-MM-DD")
		}
		for _, section := range []string{"## Context", "## Decision", "## Consequences"} {
			if !regexp.MustCompile(`(?m)^` + section + `$`).Match(text) {
				t.Errorf("%s: no %q section", name, section)
			}
		}
	}
}

// row is one row of the rule table: its cells by column name, and the
// line it was read from.
type row struct {
	line  int
	cells map[string]string
}

func (r row) name() string {
	if ids := ruleIDs(r.cells[colRule]); len(ids) > 0 {
		return ids[0]
	}
	return fmt.Sprintf("row at line %d", r.line)
}

var ruleID = regexp.MustCompile(`R-[A-Z]+(?:-[A-Z0-9]+)+`)

func ruleIDs(cell string) []string { return ruleID.FindAllString(cell, -1) }

func readRuleMap(path string) ([]row, error) {
	text, err := os.ReadFile(path) //nolint:gosec // G304: the repository's own rule map
	if err != nil {
		return nil, err
	}
	return parseRuleTable(string(text))
}

// parseRuleTable reads the first Markdown table whose header has the rule
// map's columns.
func parseRuleTable(text string) ([]row, error) {
	var header []string
	var rows []row
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if header != nil {
				break // the table has ended
			}
			continue
		}
		cells := splitRow(line)
		switch {
		case header == nil:
			if slices.Contains(cells, colRule) && slices.Contains(cells, colCode) && slices.Contains(cells, colProof) {
				header = cells
			}
		case strings.Trim(line, "|-: ") == "":
			// the delimiter row
		default:
			if len(cells) != len(header) {
				return nil, fmt.Errorf("line %d: %d cells, the header has %d", i+1, len(cells), len(header))
			}
			r := row{line: i + 1, cells: map[string]string{}}
			for j, c := range cells {
				r.cells[header[j]] = c
			}
			rows = append(rows, r)
		}
	}
	if header == nil {
		return nil, fmt.Errorf("no table with the columns %q, %q and %q", colRule, colCode, colProof)
	}
	for _, col := range []string{colDemands, colPrevents} {
		if !slices.Contains(header, col) {
			return nil, fmt.Errorf("the rule table has no %q column", col)
		}
	}
	return rows, nil
}

func splitRow(line string) []string {
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

var (
	link     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`([^`]+)`")
)

// checkRows checks each row's code and proof cells. Links are relative to
// docDir (the document's directory, relative to repo). In the code cell,
// every name in backticks must be declared (func, method as Type.Name,
// type, const, var, struct field or interface method) in one of the Go
// files the cell links, or appear as a word in one of its other files (SQL,
// the model). In the proof cell, every name in backticks must be a Test,
// Fuzz or Benchmark function of one of the test files the cell links.
func checkRows(repo, docDir string, rows []row) []string {
	var problems []string
	for _, r := range rows {
		for _, col := range []string{colCode, colProof} {
			cell := r.cells[col]
			var files []string
			for _, m := range link.FindAllStringSubmatch(cell, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				p := filepath.Join(repo, docDir, target)
				if _, err := os.Stat(p); err != nil {
					problems = append(problems, fmt.Sprintf("%s: %s does not exist", r.name(), m[1]))
					continue
				}
				files = append(files, p)
			}
			// Names are checked outside the links' text.
			rest := link.ReplaceAllString(cell, "")
			for _, m := range codeSpan.FindAllStringSubmatch(rest, -1) {
				name := m[1]
				if col == colProof {
					if !isTestName(name) {
						problems = append(problems, fmt.Sprintf("%s: `%s` is not a test function name (Test..., Fuzz..., Benchmark...)", r.name(), name))
						continue
					}
					if !declaredIn(name, files, true) {
						problems = append(problems, fmt.Sprintf("%s: test `%s` is declared in none of %v", r.name(), name, rel(repo, files)))
					}
					continue
				}
				if !declaredIn(name, files, false) {
					problems = append(problems, fmt.Sprintf("%s: `%s` is declared in none of %v", r.name(), name, rel(repo, files)))
				}
			}
		}
	}
	return problems
}

func isTestName(name string) bool {
	for _, prefix := range []string{"Test", "Fuzz", "Benchmark"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && rest != "" && !unicode.IsLower([]rune(rest)[0]) {
			return true
		}
	}
	return false
}

func rel(repo string, files []string) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i], _ = filepath.Rel(repo, f)
	}
	return out
}

// declaredIn reports whether name is declared in one of the Go files, or
// (not for tests) appears as a word in one of the other files.
func declaredIn(name string, files []string, test bool) bool {
	for _, f := range files {
		if strings.HasSuffix(f, ".go") {
			decls, err := goDecls(f)
			if err == nil && decls[name] && (!test || strings.HasSuffix(f, "_test.go")) {
				return true
			}
			continue
		}
		if test {
			continue
		}
		text, err := os.ReadFile(f) //nolint:gosec // G304: the repository's own Go files
		if err == nil && regexp.MustCompile(`(^|[^A-Za-z0-9_])`+regexp.QuoteMeta(name)+`($|[^A-Za-z0-9_])`).Match(text) {
			return true
		}
	}
	return false
}

// goDecls lists the names a Go file declares at top level: functions,
// methods as Type.Name, types, consts and vars, and the fields and
// interface methods of its types as Type.Name.
func goDecls(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	decls := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				decls[d.Name.Name] = true
				continue
			}
			decls[receiverType(d.Recv.List[0].Type)+"."+d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					decls[s.Name.Name] = true
					var members []*ast.Field
					switch t := s.Type.(type) {
					case *ast.StructType:
						members = t.Fields.List
					case *ast.InterfaceType:
						members = t.Methods.List
					}
					for _, m := range members {
						for _, n := range m.Names {
							decls[s.Name.Name+"."+n.Name] = true
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						decls[n.Name] = true
					}
				}
			}
		}
	}
	return decls, nil
}

func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.IndexExpr: // a generic type's receiver, T[P]
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}

var fence = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")

// markdownLinks returns the targets of the links and images of a Markdown
// text, outside fenced code blocks and code spans.
func markdownLinks(text string) []string {
	text = fence.ReplaceAllString(text, "")
	text = codeSpan.ReplaceAllString(text, "")
	var out []string
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// headingAnchors returns the anchors the code host gives a Markdown file's
// headings: lower case, punctuation dropped, spaces as hyphens, and -1, -2
// ... after repeats.
func headingAnchors(text string) []string {
	text = fence.ReplaceAllString(text, "")
	seen := map[string]int{}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", anchor, n))
		} else {
			out = append(out, anchor)
		}
		seen[anchor]++
	}
	return out
}
