package plugintype_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheDocsProgramIsTheExample checks that the program
// docs/plugin-types.md shows under
// <!-- example:actors/plugintype/example_test.go --> is Example, which go
// test runs and checks: the same file, as package main with func main,
// without the example's doc comment and its Output lines.
func TestTheDocsProgramIsTheExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plugin-types.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)<!-- example:actors/plugintype/example_test.go -->\n```go\n(.*?)```\n").FindSubmatch(doc)
	require.NotNil(t, block, "docs/plugin-types.md has no Go block marked <!-- example:actors/plugintype/example_test.go -->")
	source, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	program, found := strings.CutPrefix(string(source), "package plugintype_test\n")
	require.True(t, found, "the example is in package plugintype_test")
	program = regexp.MustCompile(`(?s)\n(// [^\n]*\n)+func Example\(\) \{\n`).ReplaceAllString(program, "\nfunc main() {\n")
	program = regexp.MustCompile(`(?s)\n\t// Output:\n(\t//[^\n]*\n)*\}\n$`).ReplaceAllString(program, "\n}\n")
	require.Equal(t, "package main\n"+program, string(block[1]),
		"docs/plugin-types.md's program and actors/plugintype/example_test.go differ: change both")
}
