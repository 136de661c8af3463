package registry_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheReadmeExampleIsExampleOpen checks that the program README.md shows
// under <!-- example:registry/example_open_test.go --> is Example_open, the
// example go test compiles and runs: the same file, as package main with
// func main, without the example's doc comment and its Output lines.
func TestTheReadmeExampleIsExampleOpen(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)<!-- example:registry/example_open_test.go -->\n```go\n(.*?)```\n").FindSubmatch(readme)
	require.NotNil(t, block, "README.md has no Go block marked <!-- example:registry/example_open_test.go -->")

	source, err := os.ReadFile("example_open_test.go")
	require.NoError(t, err)
	require.Equal(t, asProgram(t, string(source)), string(block[1]),
		"README.md's example and registry/example_open_test.go differ: change both")
}

// asProgram turns an example file into the program a reader would run.
func asProgram(t *testing.T, source string) string {
	t.Helper()
	program, found := strings.CutPrefix(source, "package registry_test\n")
	require.True(t, found, "the example is in package registry_test")
	program = regexp.MustCompile(`(?s)\n(// [^\n]*\n)+func Example_open\(\) \{\n`).ReplaceAllString(program, "\nfunc main() {\n")
	program = regexp.MustCompile(`(?s)\n\t// Output:\n(\t//[^\n]*\n)*\}\n$`).ReplaceAllString(program, "\n}\n")
	require.Contains(t, program, "func main() {\n")
	return "package main\n" + program
}
