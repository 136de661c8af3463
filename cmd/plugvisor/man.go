package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	cmdline "github.com/plugvisor/plugvisor/internal/cli"
	"github.com/plugvisor/plugvisor/version"
)

// newManCmd is `plugvisor man DIR`, hidden: make man runs it to write a
// man page for every command and help topic, from the same tree that
// prints -h.
func newManCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "man DIR",
		Short:   "write the man pages (section 1) of every command and help topic into DIR",
		Example: "  plugvisor man .bin/man/man1",
		Hidden:  true,
		Args:    cmdline.Args("DIR", "plugvisor man .bin/man/man1"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeManPages(root, args[0])
		},
	}
}

// writeManPages writes plugvisor.1, plugvisor-agent.1, ... into dir. The
// date is $SOURCE_DATE_EPOCH's when it is set, so that a release's pages
// are the same on every build.
func writeManPages(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root.DisableAutoGenTag = true
	plainText(root)
	header := &doc.GenManHeader{Section: "1", Source: "plugvisor " + version.Get().Version, Manual: "plugvisor manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	// The help topics are no commands of the tree: each gets its page
	// under a parent of the same name as the root.
	parent := &cobra.Command{Use: root.Name()}
	for _, c := range helpTopics() {
		parent.AddCommand(c)
		plainText(c)
		if err := writeManPage(c, header, filepath.Join(dir, "plugvisor-"+c.Name()+".1")); err != nil {
			return err
		}
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	_, err := fmt.Fprintf(root.OutOrStdout(), "wrote %s into %s\n", count(len(pages), "man page"), dir)
	return err
}

// plainText makes the help of c and the commands under it read as written
// once cobra has passed it through Markdown into the man pages: "<data-dir>"
// stays, "plugvisor_volume_stats_*" is not made italic. Lines indented by
// four spaces are Markdown's preformatted blocks, and stay as they are.
func plainText(c *cobra.Command) {
	c.Long = escapeMarkdown(c.Long)
	c.Flags().VisitAll(func(f *pflag.Flag) { f.Usage = escapeMarkdown(f.Usage) })
	for _, sub := range c.Commands() {
		plainText(sub)
	}
}

// markdownSpecial escapes what Markdown would read as markup.
var markdownSpecial = strings.NewReplacer(`\`, `\\`, "<", `\<`, ">", `\>`, "_", `\_`, "*", `\*`, "`", "\\`")

func escapeMarkdown(s string) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "\t") {
			lines[i] = markdownSpecial.Replace(line)
		}
	}
	return strings.Join(lines, "\n")
}

// writeManPage writes the man page of c alone into path.
func writeManPage(c *cobra.Command, header *doc.GenManHeader, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := doc.GenMan(c, header, f); err != nil {
		f.Close()
		return fmt.Errorf("man page of %s: %w", c.CommandPath(), err)
	}
	return f.Close()
}
