package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// internal/app's package documentation lists every use case: every
// exported type of the package with a Handle method, and nothing else
// (the core, IdempotentCommand[C, T], is generic: what the use cases run on).
func TestAppDocListsEveryUseCase(t *testing.T) {
	files := parseDir(t, filepath.Join(root, "internal/app"))
	var listed, useCases []string
	for _, f := range files {
		if f.file.Doc != nil {
			listed = append(listed, listedNames(f.file.Doc.Text())...)
		}
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv != nil && fn.Name.Name == "Handle" && !generic(fn.Recv.List[0].Type) {
				if recv := receiverType(fn.Recv.List[0].Type); ast.IsExported(recv) {
					useCases = append(useCases, recv)
				}
			}
		}
	}
	slices.Sort(listed)
	slices.Sort(useCases)
	if !slices.Equal(listed, useCases) {
		t.Errorf("internal/app/doc.go lists the use cases %v; the types with a Handle method are %v", listed, useCases)
	}
}

// generic reports whether a receiver is a generic type's, T[P].
func generic(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch e.(type) {
	case *ast.IndexExpr, *ast.IndexListExpr:
		return true
	}
	return false
}

// listedNames are the names a package comment lists as "  - Name: ...".
func listedNames(doc string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s*-\s+([A-Z][A-Za-z0-9]*):`).FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestListedNamesReadsTheList(t *testing.T) {
	got := listedNames("Use cases:\n\n  - ChargePayment: charge.\n  - GetOrder: read\n    on two lines.\nNot - Listed: here\n")
	if !slices.Equal(got, []string{"ChargePayment", "GetOrder"}) {
		t.Fatalf("listedNames = %v", got)
	}
}

// internal/domain's package documentation names the modules it may import
// beside the standard library, and they are the ones make lint allows.
func TestDomainDocStatesTheLintRulesDependencies(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal/domain/doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+`)
	stated := module.FindAllString(f.Doc.Text(), -1)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var rule string
	for line := range strings.SplitSeq(string(makefile), "\n") {
		if strings.Contains(line, "./internal/domain/") && strings.Contains(line, "grep -v") {
			rule = line
		}
	}
	if rule == "" {
		t.Fatal("Makefile: no lint rule for internal/domain's imports")
	}
	var allowed []string
	for _, m := range regexp.MustCompile(`-e '\^([^$']+)\$\$'`).FindAllStringSubmatch(rule, -1) {
		allowed = append(allowed, m[1])
	}
	slices.Sort(stated)
	slices.Sort(allowed)
	if len(allowed) == 0 || !slices.Equal(stated, allowed) {
		t.Errorf("internal/domain/doc.go names %v beside the standard library; make lint allows %v", stated, allowed)
	}
}
