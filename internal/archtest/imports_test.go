package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/plugvisor/plugvisor/"

// mayImport is the import rule of each package of the module: the packages
// of ours its non-test files may import, relative to the module path. It is
// the table of ARCHITECTURE.md; a package missing here fails the test until
// it gets a row.
var mayImport = map[string][]string{
	"errclass":                      nil,
	"messages":                      nil,
	"names":                         nil,
	"version":                       nil,
	"storage":                       nil,
	"storage/storagetest":           {"storage"},
	"actors":                        {"internal/hclogslog", "messages"},
	"actors/plugintype":             {"messages"},
	"actors/probe":                  {"actors", "messages"},
	"supervisor":                    {"actors", "messages"},
	"supervisor/supervisortest":     {"supervisor"},
	"registry":                      {"names", "storage", "actors", "messages", "registry/internal/table", "registry/internal/plain", "registry/internal/slab", "registry/internal/gone"},
	"registry/internal/gone":        {"messages", "registry/internal/table"},
	"registry/internal/table":       {"messages"},
	"registry/internal/plain":       {"names", "messages"},
	"registry/internal/slab":        nil,
	"registry/registrytest":         {"registry", "messages", "storage"},
	"reliability":                   nil,
	"registry/workload":             {"registry", "csi/catalog/model", "internal/cputime", "messages"},
	"csi/catalog/model":             {"names", "messages"},
	"csi":                           {"csi/catalog/model", "names", "messages"},
	"csi/manager":                   {"csi", "registry", "supervisor", "actors", "actors/plugintype", "messages"},
	"csi/volumes":                   {"csi", "csi/catalog/model", "internal/mountinfo", "names", "registry", "storage", "supervisor", "actors", "messages"},
	"csi/catalog":                   {"csi", "csi/catalog/model", "names", "storage", "actors", "messages"},
	"csi/controller":                {"csi", "csi/catalog", "csi/catalog/model", "registry", "names"},
	"csi/csitest":                   {"csi"},
	"csi/hostpath":                  {"csi/hostpath/internal/mount", "internal/cli", "names"},
	"csi/hostpath/internal/mount":   nil,
	"csi/hostpath/hostpathtest":     {"csi/hostpath", "csi/hostpath/internal/mount"},
	"discovery":                     {"names", "csi", "registry", "supervisor", "actors", "actors/plugintype", "messages"},
	"kubeletreg":                    {"discovery", "names", "csi", "registry", "supervisor", "actors", "messages"},
	"kubeletreg/kubeletregtest":     nil,
	"dockervolume":                  {"discovery", "names", "registry", "supervisor", "actors", "actors/plugintype", "messages"},
	"dockervolume/localvolume":      {"dockervolume", "internal/cli", "names"},
	"api":                           {"names", "csi", "csi/catalog/model", "csi/controller", "csi/volumes", "discovery", "dockervolume", "dockervolume/volumes", "registry", "messages", "version"},
	"agent":                         {"*"},
	"cmd/plugvisor":                 {"*"},
	"cmd/hostpath-csi":              {"csi/hostpath", "internal/cli"},
	"internal/archtest":             nil,
	"internal/testpki":              nil,
	"internal/chaos":                nil,
	"internal/racelog":              nil,
	"internal/testbin":              nil,
	"internal/errwalk":              nil,
	"internal/cputime":              nil,
	"internal/slowclients":          nil,
	"fleet/etcdtest":                {"fleet/embedded", "internal/pki"},
	"internal/pki":                  {"names"},
	"fleet/embedded":                {"names"},
	"internal/cli":                  nil,
	"internal/hclogslog":            nil,
	"internal/mountinfo":            nil,
	"internal/httpgate":             nil,
	"internal/startlog":             nil,
	"internal/sdnotify":             nil,
	"fleet":                         {"csi", "csi/catalog/model", "names", "messages"},
	"fleet/member":                  {"fleet", "csi/catalog", "csi/catalog/model", "names", "actors", "messages"},
	"dockervolume/volumes":          {"dockervolume", "discovery", "registry", "storage", "actors", "messages"},
	"dockervolume/dockervolumetest": nil,
}

// everyone are the packages every package may import, as it may import
// the standard library's errors: the error classes.
var everyone = []string{"errclass"}

// mustNotImportInTests are the packages whose test files, too, keep out of
// the packages named: the protocol package tests the protocol alone.
var mustNotImportInTests = map[string][]string{
	"csi": {"csi/manager", "csi/volumes", "csi/catalog"},
}

// pkg is one package of the module as go list describes it.
type pkg struct {
	path    string
	imports []string // of ours, relative to the module, non-test files
	tests   []string // of ours, relative to the module, test files
}

// violations lists each import that breaks a rule, in order.
func violations(pkgs []pkg, may map[string][]string, notInTests map[string][]string) []string {
	var out []string
	for _, p := range pkgs {
		allowed, known := may[p.path]
		if !known {
			out = append(out, fmt.Sprintf("%s has no import rule: give it a row in ARCHITECTURE.md and in mayImport", p.path))
			continue
		}
		for _, imp := range p.imports {
			if !slices.Contains(allowed, "*") && !slices.Contains(allowed, imp) && !slices.Contains(everyone, imp) {
				out = append(out, fmt.Sprintf("%s imports %s; it may import only %v", p.path, imp, allowed))
			}
		}
		for _, imp := range p.tests {
			if slices.Contains(notInTests[p.path], imp) {
				out = append(out, fmt.Sprintf("a test of %s imports %s, which it must not", p.path, imp))
			}
		}
	}
	return out
}

// listModule describes every package of the module with go list.
func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	ours := func(field string) []string {
		var rel []string
		for _, imp := range strings.Fields(field) {
			if r, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(rel, r) {
				rel = append(rel, r)
			}
		}
		return rel
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), "|", 3)
		require.Len(t, parts, 3, "go list line %q", sc.Text())
		pkgs = append(pkgs, pkg{
			path:    strings.TrimPrefix(parts[0], module),
			imports: ours(parts[1]),
			tests:   ours(parts[2]),
		})
	}
	return pkgs
}

func TestEveryPackageImportsOnlyWhatItsRuleAllows(t *testing.T) {
	pkgs := listModule(t)
	paths := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		paths = append(paths, p.path)
	}
	for _, want := range []string{"csi", "csi/manager", "csi/volumes", "csi/catalog", "csi/catalog/model"} {
		require.Contains(t, paths, want, "go list must see the CSI packages")
	}
	require.Empty(t, violations(pkgs, mayImport, mustNotImportInTests))
}

func TestTheRulesCatchABadImport(t *testing.T) {
	cases := []struct {
		name string
		pkg  pkg
		want string
	}{
		{
			name: "the protocol package importing an actor package",
			pkg:  pkg{path: "csi", imports: []string{"messages", "csi/volumes"}},
			want: "csi imports csi/volumes",
		},
		{
			name: "the catalog importing the volume manager",
			pkg:  pkg{path: "csi/catalog", imports: []string{"csi", "csi/volumes"}},
			want: "csi/catalog imports csi/volumes",
		},
		{
			name: "the volume manager importing the catalog",
			pkg:  pkg{path: "csi/volumes", imports: []string{"csi/catalog"}},
			want: "csi/volumes imports csi/catalog",
		},
		{
			name: "a test of the protocol package importing the CSI manager",
			pkg:  pkg{path: "csi", tests: []string{"csi/csitest", "csi/manager"}},
			want: "a test of csi imports csi/manager",
		},
		{
			name: "a package with no rule",
			pkg:  pkg{path: "csi/newthing"},
			want: "csi/newthing has no import rule",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := violations([]pkg{tc.pkg}, mayImport, mustNotImportInTests)
			require.Len(t, got, 1)
			require.Contains(t, got[0], tc.want)
		})
	}
}
