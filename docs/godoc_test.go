package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// documented are the packages whose exported identifiers must all have a
// doc comment: the use cases and their ports, and the adapters that
// implement them. Struct fields and interface methods count; a constant or
// variable in a group may be covered by the group's comment; methods of
// unexported types do not count, and neither do the methods of a type the
// package declares as implementing an interface (var _ I = (*T)(nil)):
// the interface's comments document them. A comment that says no more
// than "M implements I." is refused: it only repeats the declaration.
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
	"internal/replaycache",
	"internal/telemetry",
}

func TestPortsAndAdaptersHaveDocComments(t *testing.T) {
	for _, dir := range documented {
		for _, missing := range undocumented(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s has no doc comment", dir, missing)
		}
	}
}

// filler is a doc comment that says nothing but which interface its
// method or type implements.
var filler = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]* implements [A-Za-z_][A-Za-z0-9_.]*( and [A-Za-z_][A-Za-z0-9_.]*)?\.?$`)

func TestDocCommentsAreNotFiller(t *testing.T) {
	for _, dir := range documented {
		for _, f := range fillerComments(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s", dir, f)
		}
	}
}

// The filler check must be able to fail, and must let a comment that says
// more pass.
func TestFillerCheckFindsFiller(t *testing.T) {
	dir := t.TempDir()
	src := `package p

// Get implements app.Store.
func (T) Get() {}

// Put implements app.Store: it waits for the lock first.
func (T) Put() {}

// T implements app.Store and app.Other.
type T struct{}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(fillerComments(t, dir), "; ")
	want := `p.go: "Get implements app.Store."; p.go: "T implements app.Store and app.Other."`
	if got != want {
		t.Errorf("filler = %q, want %q", got, want)
	}
}

// fillerComments lists the doc comments of dir's package (test files
// aside) that are filler.
func fillerComments(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range parseDir(t, dir) {
		for _, d := range f.file.Decls {
			var doc *ast.CommentGroup
			switch d := d.(type) {
			case *ast.FuncDecl:
				doc = d.Doc
			case *ast.GenDecl:
				doc = d.Doc
				if doc == nil && len(d.Specs) == 1 {
					if ts, ok := d.Specs[0].(*ast.TypeSpec); ok {
						doc = ts.Doc
					}
				}
			}
			if doc != nil && filler.MatchString(strings.TrimSpace(doc.Text())) {
				out = append(out, fmt.Sprintf("%s: %q", f.name, strings.TrimSpace(doc.Text())))
			}
		}
	}
	return out
}

type parsedFile struct {
	name string
	file *ast.File
}

// parseDir parses the package's files in dir, test files aside.
func parseDir(t *testing.T, dir string) []parsedFile {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []parsedFile
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsedFile{name: name, file: f})
	}
	return out
}

// implementers are the types a package declares as implementing an
// interface: var _ I = (*T)(nil), var _ I = T{}, var _ I = &T{}.
func implementers(files []parsedFile) map[string]bool {
	out := map[string]bool{}
	for _, f := range files {
		for _, d := range f.file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				v, ok := s.(*ast.ValueSpec)
				if !ok || len(v.Names) != 1 || v.Names[0].Name != "_" || v.Type == nil || len(v.Values) != 1 {
					continue
				}
				if name := assertedType(v.Values[0]); name != "" {
					out[name] = true
				}
			}
		}
	}
	return out
}

// assertedType is the type of an interface assertion's value.
func assertedType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.CallExpr: // (*T)(nil)
		if p, ok := e.Fun.(*ast.ParenExpr); ok {
			return receiverType(p.X)
		}
	case *ast.CompositeLit: // T{}
		return receiverType(e.Type)
	case *ast.UnaryExpr: // &T{}
		return assertedType(e.X)
	}
	return ""
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

// Adapter is documented by the interface it implements.
type Adapter struct{}

func (*Adapter) Do() {}

var _ Bare = (*Adapter)(nil)

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
	files := parseDir(t, dir)
	ports := implementers(files)
	var out []string
	for _, pf := range files {
		f := pf.file
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv == nil {
					out = append(out, "func "+d.Name.Name)
				} else if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) && !ports[recv] {
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
