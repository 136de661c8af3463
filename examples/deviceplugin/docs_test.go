package deviceplugin_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheDocsLineCountsAreMeasured checks each file row of
// docs/plugin-types.md's size table against the file: all lines (wc -l),
// and code lines (neither blank nor a comment).
func TestTheDocsLineCountsAreMeasured(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "plugin-types.md"))
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `([^`]+\\.go)` \\|[^|]*\\| (\\d+) \\| (\\d+) \\|$")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, rows, "docs/plugin-types.md has no size table")
	comment := regexp.MustCompile(`^\s*(//|$)`)
	for _, r := range rows {
		src, err := os.ReadFile(filepath.Join(root, r[1]))
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
		code := 0
		for _, l := range lines {
			if !comment.MatchString(l) {
				code++
			}
		}
		require.Equal(t, r[2], strconv.Itoa(len(lines)), "%s: lines; measure again (wc -l) and fix the table", r[1])
		require.Equal(t, r[3], strconv.Itoa(code), "%s: code lines; measure again and fix the table", r[1])
	}
}
