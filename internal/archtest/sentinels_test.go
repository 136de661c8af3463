package archtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEverySentinelHasAClass checks the house rule of ARCHITECTURE.md's
// "Errors": no package-level error of the module's non-test code is made
// with errors.New. Each is made with errclass.New, so that it has a class
// and the API maps it to its status, never to a 500 of no class. And no
// sentinel's text starts with a package prefix ("registry: ").
func TestEverySentinelHasAClass(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{.Dir}}|{{join .GoFiles " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		require.Len(t, parts, 3, "go list line %q", line)
		for _, file := range strings.Fields(parts[2]) {
			found = append(found, plainSentinels(t, filepath.Join(parts[1], file))...)
		}
	}
	require.Empty(t, found, "sentinels made with errors.New or prefixed: make each with errclass.New(class, text), unprefixed")
}

// plainSentinels lists the package-level variables of file whose value is
// errors.New(...), or errclass.New with a prefixed text, as "file:line
// name".
func plainSentinels(t *testing.T, file string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var out []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				if isErrorsNew(v) || prefixed(v) {
					out = append(out, fmt.Sprintf("%s %s", fset.Position(v.Pos()), vs.Names[i].Name))
				}
			}
		}
	}
	return out
}

func isErrorsNew(e ast.Expr) bool {
	_, ok := callOf(e, "errors", "New")
	return ok
}

// packagePrefix is a sentinel text's start that names a package.
var packagePrefix = regexp.MustCompile(`^"[a-z]+(/[a-z]+)*: `)

// prefixed reports whether e is errclass.New(class, "pkg: ...").
func prefixed(e ast.Expr) bool {
	call, ok := callOf(e, "errclass", "New")
	if !ok || len(call.Args) != 2 {
		return false
	}
	lit, ok := call.Args[1].(*ast.BasicLit)
	return ok && packagePrefix.MatchString(lit.Value)
}

// callOf returns e as a call of pkg.fn.
func callOf(e ast.Expr, pkg, fn string) (*ast.CallExpr, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return nil, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, false
	}
	id, ok := sel.X.(*ast.Ident)
	return call, ok && id.Name == pkg && sel.Sel.Name == fn
}
