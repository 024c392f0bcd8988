package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// documented are the packages whose exported identifiers must all have a
// doc comment: the use cases and their ports, and the adapters that
// implement them. Struct fields and interface methods count; a constant or
// variable in a group may be covered by the group's comment; methods of
// unexported types do not count.
var documented = []string{
	"internal/app",
	"internal/repository",
	"internal/http",
	"internal/provider",
	"internal/provider/sandbox",
	"internal/consumer",
	"internal/outbox",
	"internal/kafka/idempotent",
	"internal/jobs",
	"internal/telemetry",
}

func TestPortsAndAdaptersHaveDocComments(t *testing.T) {
	for _, dir := range documented {
		for _, missing := range undocumented(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s has no doc comment", dir, missing)
		}
	}
}

// The check must be able to fail.
func TestDocCommentCheckFindsWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// Documented is fine.
type Documented struct {
	// Field is fine.
	Field int
	Bare  int
	inner int
}

type Bare interface {
	Do()
}

func (Documented) Method() {}

// Grouped values.
const (
	A = 1
	B = 2
)

var V = 1

func F() {}

type hidden struct{}

func (hidden) Exported() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(undocumented(t, dir), ", ")
	want := "field Documented.Bare, type Bare, method Bare.Do, method Documented.Method, value V, func F"
	if got != want {
		t.Errorf("undocumented = %q, want %q", got, want)
	}
}

// undocumented lists the exported identifiers of the package in dir (test
// files aside) that have no doc comment, in source order.
func undocumented(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv == nil {
					out = append(out, "func "+d.Name.Name)
				} else if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) {
					out = append(out, "method "+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					out = append(out, undocumentedSpec(d, s)...)
				}
			}
		}
	}
	return out
}

func undocumentedSpec(d *ast.GenDecl, s ast.Spec) []string {
	var out []string
	switch s := s.(type) {
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return nil
		}
		if s.Doc == nil && (d.Doc == nil || d.Lparen.IsValid()) {
			out = append(out, "type "+s.Name.Name)
		}
		var members []*ast.Field
		kind := "field"
		switch t := s.Type.(type) {
		case *ast.StructType:
			members = t.Fields.List
		case *ast.InterfaceType:
			members, kind = t.Methods.List, "method"
		}
		for _, m := range members {
			if m.Doc != nil || m.Comment != nil {
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, kind+" "+s.Name.Name+"."+n.Name)
				}
			}
		}
	case *ast.ValueSpec:
		if s.Doc != nil || s.Comment != nil || d.Doc != nil {
			return nil
		}
		for _, n := range s.Names {
			if n.IsExported() {
				out = append(out, "value "+n.Name)
			}
		}
	}
	return out
}
