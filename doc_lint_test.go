package informer_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The lint tests below read the source of every package of the repository (the root
// module and every module beneath it): they walk from the root package's directory,
// skipping testdata, vendor and directories whose name starts with "." or "_".

// repoGoFiles lists the .go files under the repository root, relative to it, in
// lexical order. tests includes the _test.go files.
func repoGoFiles(t *testing.T, tests bool) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && (tests || !strings.HasSuffix(name, "_test.go")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no .go file found under the working directory")
	}
	return files
}

// undocumented lists the exported identifiers of one file that have no doc comment,
// as "file:line: kind name". The rule is golint's, extended to fields and interface
// methods:
//   - a function, a method of an exported type, a type: its own doc comment (a type
//     may take it from an ungrouped declaration, which is the same thing);
//   - a constant or variable: its own doc comment or one on its group;
//   - an exported field of an exported struct type, a method of an exported
//     interface: a doc comment above it or a line comment after it.
//
// Methods of unexported types and fields of unexported types are not part of the
// package's documentation and are not checked.
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	miss := func(pos token.Pos, kind, name string) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s %s", p.Filename, p.Line, kind, name))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				if d.Doc == nil {
					miss(d.Pos(), "func", d.Name.Name)
				}
				continue
			}
			recv := receiverType(d.Recv.List[0].Type)
			if ast.IsExported(recv) && d.Doc == nil {
				miss(d.Pos(), "method", recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && (d.Doc == nil || d.Lparen.IsValid()) {
						miss(s.Pos(), "type", s.Name.Name)
					}
					out = append(out, undocumentedMembers(fset, s)...)
				case *ast.ValueSpec:
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					for _, n := range s.Names {
						if n.IsExported() && s.Doc == nil && d.Doc == nil {
							miss(n.Pos(), kind, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// undocumentedMembers lists the exported fields of an exported struct type and the
// methods of an exported interface type that have neither a doc nor a line comment.
func undocumentedMembers(fset *token.FileSet, s *ast.TypeSpec) []string {
	var list *ast.FieldList
	kind := "field"
	switch t := s.Type.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list, kind = t.Methods, "interface method"
	default:
		return nil
	}
	var out []string
	for _, fld := range list.List {
		if fld.Doc != nil || fld.Comment != nil {
			continue
		}
		for _, n := range fld.Names { // embedded fields and types have no names
			if n.IsExported() {
				p := fset.Position(n.Pos())
				out = append(out, fmt.Sprintf("%s:%d: %s %s.%s", p.Filename, p.Line, kind, s.Name.Name, n.Name))
			}
		}
	}
	return out
}

// receiverType is the name of a method's receiver type: T for T, *T, T[K], *T[K, V].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestDocComments fails on every exported identifier of the repository without a doc
// comment (see undocumented for the rule), listing them all.
func TestDocComments(t *testing.T) {
	fset := token.NewFileSet()
	var missing []string
	files := repoGoFiles(t, false)
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if ast.IsGenerated(f) {
			continue
		}
		missing = append(missing, undocumented(fset, f)...)
	}
	if len(missing) > 0 {
		t.Errorf("%d exported identifiers have no doc comment (in %d files read); write one that starts with the name and says what it guarantees, costs and defaults to:\n\t%s",
			len(missing), len(files), strings.Join(missing, "\n\t"))
	}
}

// checklistID matches the ids of review checklists and section numbers. The code
// names behaviours in words; an id means nothing to a reader without the list.
var checklistID = regexp.MustCompile(`\b(R|C|D|I|SI|SP|PL|RS|HS|F|W|CR|O)-[0-9]+[a-z]?\b|§[0-9]+`)

// TestNoChecklistIDs fails on every checklist id in any .go file of the repository:
// comments, strings, test names and testdata alike.
func TestNoChecklistIDs(t *testing.T) {
	var found []string
	files := repoGoFiles(t, true)
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && strings.Contains(filepath.ToSlash(p), "/testdata/") {
			files = append(files, p) // testdata too
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if ids := checklistID.FindAllString(line, -1); ids != nil {
				found = append(found, fmt.Sprintf("%s:%d: %s: %s", name, i+1, strings.Join(ids, ", "), strings.TrimSpace(line)))
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("%d lines name checklist ids; name the behaviour in words instead:\n\t%s", len(found), strings.Join(found, "\n\t"))
	}
}

// TestExamplesSelfContained fails if an example imports a package a user cannot
// import: an internal package of this repository, or another example's package. An
// example's directory must compile when copied out of the repository.
func TestExamplesSelfContained(t *testing.T) {
	const repo = "github.com/informer-go/informer"
	fset := token.NewFileSet()
	var bad []string
	for _, name := range repoGoFiles(t, true) {
		if !strings.HasPrefix(filepath.ToSlash(name), "examples/") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != repo && !strings.HasPrefix(p, repo+"/") {
				continue
			}
			parts := strings.Split(strings.TrimPrefix(p, repo), "/")
			if slices.Contains(parts, "internal") || strings.HasPrefix(p, repo+"/examples/") {
				bad = append(bad, fmt.Sprintf("%s imports %s", name, p))
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("examples import packages their users cannot:\n\t%s", strings.Join(bad, "\n\t"))
	}
}

// The root's stages meet through methods: no root file reads or writes an unexported
// field of a struct type that another root file declares (the rule stated in doc.go). A
// selector x.f with f unexported is a crossing when f is a field declared only in other
// files of the package and never in the file itself, nor a method or function name of the
// package. It reads syntax only, so a field that shares its name with one the file
// declares goes unseen; it never reports a field the file declares.
func TestStagesMeetThroughMethods(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkg := pkgs["informer"]
	if pkg == nil {
		t.Fatal("no package informer in the working directory")
	}
	fieldsOf := map[string]map[string]bool{} // file → unexported field names it declares
	funcs := map[string]bool{}               // unexported method and function names
	for name, f := range pkg.Files {
		fields := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.StructType:
				for _, fl := range n.Fields.List {
					for _, id := range fl.Names {
						if !id.IsExported() {
							fields[id.Name] = true
						}
					}
				}
			case *ast.FuncDecl:
				funcs[n.Name.Name] = true
			case *ast.InterfaceType:
				for _, m := range n.Methods.List {
					for _, id := range m.Names {
						funcs[id.Name] = true
					}
				}
			}
			return true
		})
		fieldsOf[name] = fields
	}
	var crossings []string
	for name, f := range pkg.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.IsExported() || fieldsOf[name][sel.Sel.Name] || funcs[sel.Sel.Name] {
				return true
			}
			var in []string
			for other, fields := range fieldsOf {
				if other != name && fields[sel.Sel.Name] {
					in = append(in, other)
				}
			}
			if len(in) > 0 {
				slices.Sort(in)
				crossings = append(crossings, fmt.Sprintf("%s: .%s, a field declared in %s", fset.Position(sel.Sel.Pos()), sel.Sel.Name, strings.Join(in, " or ")))
			}
			return true
		})
	}
	slices.Sort(crossings)
	if len(crossings) > 0 {
		t.Errorf("%d reads of another file's struct fields; reach the stage through a method (see doc.go):\n\t%s", len(crossings), strings.Join(crossings, "\n\t"))
	}
}
