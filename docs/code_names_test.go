package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The pages speak to readers who follow a name into the code. A page that
// names a function renamed since, a file that moved or a setting that is
// gone sends its reader to nothing, and no link check sees it: the names
// are in backticks, not links. So every name in backticks on every page
// (README.md and docs/*.md, outside fenced blocks) that has the shape of
// code is looked up, as docs/model.md's tables are (checkModelTables): a
// path must exist, an environment variable must occur in the code, a
// Type.Member must be declared, package.Name must name a declaration of
// one of the module's packages, and a bare Go name (MixedCaps, or
// lowerCamel with a capital inside) must be declared or occur in the code.
// What has no such shape (SQL, JSON fields, HTTP headers, routes, event
// types, values) is left alone.
func TestEveryCodeNameAPageStatesExists(t *testing.T) {
	code, err := readCodeAndTests(root)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The decision records are not read: each names the code as it was on
	// its date, and history is not rewritten.
	pages = append(pages, filepath.Join(root, "README.md"))
	checked := 0
	for _, page := range pages {
		text, err := os.ReadFile(page) //nolint:gosec // G304: the repository's own docs
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		spans := codeNameSpans(string(text))
		checked += len(spans)
		for _, problem := range checkCodeNames(root, code, name, spans) {
			t.Error(problem)
		}
	}
	if checked < 500 {
		t.Fatalf("only %d names in backticks checked on %d pages: the reader lost them", checked, len(pages))
	}
}

// The check must be able to fail: each kind of name that no longer exists
// gets a complaint, and names that exist, or are not code, get none.
func TestCodeNameCheckFindsWhatIsGone(t *testing.T) {
	code, err := readCodeAndTests(root)
	if err != nil {
		t.Fatal(err)
	}
	page := "The core's `IdempotentCommand.Handle` and `IdempotentCommand.rebuilt`, `app.Settle` and `app.Guess`,\n" +
		"`NoSuchTypeAnywhere`, `chargeClaimSQLGone`, `internal/app/ports.go`, `internal/app/outcome.go`,\n" +
		"`TestSettleNeverGuesses`, `TestSettleAlwaysGuesses`, `http.Request.GetBody`, `COMPOSE_CHECK_TIMEOUT`,\n" +
		"`PROVIDER_REQUEST_MAX_AGE`, `PROVIDER_MAX_REQUEST_AGE`, `PaymentCaptured.v1`, `payment.status`,\n" +
		"`Idempotency-Key`, `externalPaymentId`, `ON CONFLICT DO NOTHING`.\n" +
		"```\n`IgnoredInAFencedBlock`\n```\n"
	problems := checkCodeNames(root, code, "page.md", codeNameSpans(page))
	want := []string{"IdempotentCommand.rebuilt", "app.Guess", "NoSuchTypeAnywhere", "chargeClaimSQLGone", "internal/app/ports.go",
		"TestSettleAlwaysGuesses", "PROVIDER_REQUEST_MAX_AGE"}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d: %q", len(problems), len(want), problems)
	}
	for i, name := range want {
		if !strings.Contains(problems[i], "`"+name+"`") {
			t.Errorf("problem %d is %q, want one about %s", i, problems[i], name)
		}
	}
}

// readCodeAndTests is readCode, with what the module's tests declare
// (every _test.go file, of every build tag: the tests, benchmarks and fuzz
// targets, and the fault suite's types) among the declarations, and the words of the files that are not Go (the
// compose file, the Dockerfile, the scripts, the deploy files, the
// Makefile, CI) among the words: a page names them too.
func readCodeAndTests(repo string) (codeIndex, error) {
	code, err := readCode(repo)
	if err != nil {
		return code, err
	}
	err = filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." && rel != ".ci" {
				return filepath.SkipDir
			}
			return nil
		}
		base := d.Name()
		switch {
		case strings.HasSuffix(base, "_test.go"):
			decls, err := goDecls(p)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			for n := range decls {
				code.decls[n] = true
			}
		case base == "Makefile" || base == "Dockerfile" || base == "run" || strings.HasSuffix(base, ".sh") ||
			strings.HasSuffix(base, ".yml") || strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".json") && strings.HasPrefix(rel, "deploy"):
			text, err := os.ReadFile(p) //nolint:gosec // G304: the repository's own files
			if err != nil {
				return err
			}
			for _, w := range word.FindAllString(string(text), -1) {
				code.words[w] = true
			}
		}
		return nil
	})
	return code, err
}

// codeNameSpan is a name in backticks and the line it is on.
type codeNameSpan struct {
	line int
	text string
}

// codeNameSpans returns the spans in backticks of a page, outside fenced
// blocks and with the links' targets taken out.
func codeNameSpans(text string) []codeNameSpan {
	var spans []codeNameSpan
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(link.ReplaceAllString(line, ""), -1) {
			spans = append(spans, codeNameSpan{line: i + 1, text: m[1]})
		}
	}
	return spans
}

var (
	// mixedCaps is a bare Go name a reader would look for: MixedCaps
	// with a capital past the first letter, or lowerCamel with one.
	mixedCaps = regexp.MustCompile(`^(?:[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)(?:\(\))?$`)
	// memberName is Type.Member or package.Name, the first part a Go
	// name with a capital in it or one of the module's packages.
	memberName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\(\))?$`)
	// repoPath is a path in the repository: a slash in it, and a known
	// top-level directory first.
	repoPath = regexp.MustCompile(`^(?:internal|cmd|pkg|db|docs|api|deploy|model|scripts|test)/[A-Za-z0-9_./-]*$`)
)

// checkCodeNames looks every span of page up in code; see
// TestEveryCodeNameAPageStatesExists for what is a name.
func checkCodeNames(repo string, code codeIndex, page string, spans []codeNameSpan) []string {
	var problems []string
	complain := func(s codeNameSpan, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: ", page, s.line)+fmt.Sprintf(format, args...))
	}
	for _, s := range spans {
		span := s.text
		switch {
		case repoPath.MatchString(span):
			if _, err := os.Stat(filepath.Join(repo, strings.TrimSuffix(strings.TrimSuffix(span, "..."), "/"))); err != nil {
				complain(s, "`%s` does not exist", span)
			}
		case envName.MatchString(span):
			if !code.words[span] {
				complain(s, "`%s` occurs nowhere in the code", span)
			}
		case memberName.MatchString(span):
			g := memberName.FindStringSubmatch(span)
			first, member := g[1], g[2]
			switch {
			case stdlibPackages[first] || version.MatchString(member):
			case code.packages[first]:
				if !code.decls[member] {
					complain(s, "`%s`: package %s declares no %s", span, first, member)
				}
			case mixedCaps.MatchString(first) || isUpper(first[0]):
				if !code.decls[first+"."+member] {
					complain(s, "`%s` is not declared (no such method, field or member)", span)
				}
			}
		case mixedCaps.MatchString(span):
			name := strings.TrimSuffix(span, "()")
			if !code.decls[name] && !code.words[name] {
				complain(s, "`%s` is declared nowhere and occurs nowhere in the code", span)
			}
		}
	}
	return problems
}

// version is an event type's or an API's version suffix (PaymentCaptured.v1).
var version = regexp.MustCompile(`^v[0-9]+$`)

func isUpper(b byte) bool { return b >= 'A' && b <= 'Z' }

// A figure a page states beside the command that measured it is either
// reproduced by a test (docs/capacity_test.go ties the capacity figures
// to the benchmark's JSON) or dated: the machine is shared and the code
// moves on, so a figure without its date reads as today's when it is not.
// Every section of a page (heading to heading, fenced blocks kept whole)
// that holds a measuring command and a measured figure must hold a date
// (YYYY-MM-DD).
func TestMeasuredFiguresAreDated(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := 0
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(page) //nolint:gosec // G304: the repository's own docs
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		for _, s := range undatedFigures(string(text)) {
			t.Errorf("%s:%d: %q states figures beside the command that measured them, and no date", name, s.line, s.heading)
		}
		sections += len(measuredSections(string(text)))
	}
	if sections < 20 {
		t.Fatalf("only %d sections with measured figures found: the reader lost them", sections)
	}
}

// The check must be able to fail: an undated section with a command and
// a figure is found; a dated one, one without a command and a command in
// a fenced block's comment line are not what it flags.
func TestUndatedFiguresAreFound(t *testing.T) {
	page := "# Page\n\n## Dated\n\n```sh\nmake bench-api\n```\n\n| creates/s | 1,200 req/s |\n\nRun on 2026-12-07.\n\n" +
		"## Undated\n\n`go run ./cmd/bench-api -passes 3` gave 0.85 ms a charge.\n\n" +
		"## No command\n\nA charge costs about 0.8 ms.\n\n" +
		"## Fenced\n\n```sh\n# not a heading: go run ./cmd/bench-api\n```\n"
	got := undatedFigures(page)
	if len(got) != 1 || got[0].heading != "## Undated" {
		t.Fatalf("undated sections = %+v, want only ## Undated", got)
	}
}

// pageSection is one section of a page, from its heading to the next.
type pageSection struct {
	line    int
	heading string
	text    string
}

var (
	// measuringCommand is a command whose output a page reports as figures.
	measuringCommand = regexp.MustCompile(`go run \./cmd/bench-api|go test [^\n]*-bench|make bench[a-z-]*|bench-peers/run\.sh|make test-fault-long|hyperfine|callgrind|perf stat`)
	// measuredFigure is a number with a unit of time, rate, share or size.
	measuredFigure = regexp.MustCompile(`\b[0-9][0-9,.]*\s?(?:ns|µs|ms|s|min|%|req/s|/s|KiB|MiB|GiB|MB|GB|kB)(?:\W|$)`)
	isoDate        = regexp.MustCompile(`\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b`)
)

// measuredSections splits text into sections and keeps those with a
// measuring command and a measured figure.
func measuredSections(text string) []pageSection {
	var out []pageSection
	var cur pageSection
	var body strings.Builder
	flush := func() {
		cur.text = body.String()
		if measuringCommand.MatchString(cur.text) && measuredFigure.MatchString(cur.text) {
			out = append(out, cur)
		}
		body.Reset()
	}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(line, "#") {
			flush()
			cur = pageSection{line: i + 1, heading: line}
		}
		body.WriteString(line + "\n")
	}
	flush()
	return out
}

// undatedFigures are the sections of measuredSections with no date.
func undatedFigures(text string) []pageSection {
	var out []pageSection
	for _, s := range measuredSections(text) {
		if !isoDate.MatchString(s.text) {
			out = append(out, s)
		}
	}
	return out
}
