package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRegexpCompiledAtInit fails when a package-level variable of the
// leaderrun binary's own code is initialised by compiling a regular
// expression. Package init runs in every leaderrun process, whatever its
// backend and whether or not the expression is ever used, and what it
// builds stays on the heap for the life of the process: compile it on
// first use (sync.OnceValue) instead.
func TestNoRegexpCompiledAtInit(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "tests", "tools", "examples", "scripts", "packaging", "docs", "bin", "dist":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		re := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"regexp"` {
				re = "regexp"
				if imp.Name != nil {
					re = imp.Name.Name
				}
			}
		}
		checked++
		if re == "" {
			return nil
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			ast.Inspect(gd, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.FuncLit:
					return false // runs when called, not at init
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == re && strings.Contains(sel.Sel.Name, "Compile") {
							t.Errorf("%s: a package-level variable compiles a regular expression at init (%s.%s); compile it on first use", rel, re, sel.Sel.Name)
						}
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files", checked)
	}
}
