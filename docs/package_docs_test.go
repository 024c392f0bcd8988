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
// exported type of the package with a Handle method (the core,
// IdempotentCommand[C, T], is generic: what the use cases run on), and
// nothing but use cases: a listed type without Handle is one whose
// commands are its methods (SagaSteps: Charge, Compensate), so it must
// have exported methods that take a context.
func TestAppDocListsEveryUseCase(t *testing.T) {
	files := parseDir(t, filepath.Join(root, "internal/app"))
	var listed, useCases []string
	takesCommands := map[string]bool{}
	for _, f := range files {
		if f.file.Doc != nil {
			listed = append(listed, listedNames(f.file.Doc.Text())...)
		}
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || generic(fn.Recv.List[0].Type) {
				continue
			}
			recv := receiverType(fn.Recv.List[0].Type)
			if !ast.IsExported(recv) || !fn.Name.IsExported() {
				continue
			}
			if fn.Name.Name == "Handle" {
				useCases = append(useCases, recv)
			}
			if params := fn.Type.Params.List; len(params) > 0 {
				if sel, ok := params[0].Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Context" {
					takesCommands[recv] = true
				}
			}
		}
	}
	slices.Sort(listed)
	slices.Sort(useCases)
	for _, uc := range useCases {
		if !slices.Contains(listed, uc) {
			t.Errorf("internal/app/doc.go does not list the use case %s (a type with a Handle method); it lists %v", uc, listed)
		}
	}
	for _, name := range listed {
		if !slices.Contains(useCases, name) && !takesCommands[name] {
			t.Errorf("internal/app/doc.go lists %s, which is no use case: no Handle method, and no exported method that takes a context", name)
		}
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
