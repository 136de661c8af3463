package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryHelpTopicPrintsItsTextAndItsExamples runs plugvisor help TOPIC
// for the concepts an operator meets, and checks that the root's help
// lists them.
func TestEveryHelpTopicPrintsItsTextAndItsExamples(t *testing.T) {
	rootHelp, _, code := runHere("-h")
	require.Zero(t, code)
	require.Contains(t, rootHelp, "Help topics (plugvisor help TOPIC):")
	for _, name := range []string{"volumes", "claims", "fleet", "tokens"} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, code := runHere("help", name)
			require.Zero(t, code, stderr)
			require.Empty(t, stderr)
			require.Contains(t, stdout, "\n\nExamples:\n  ")
			require.NotContains(t, stdout, "Usage:", "a topic is no command")
			require.Regexp(t, `\n  `+name+` +\S`, rootHelp, "the root's help lists the topic")
			_, stderr, code = runHere(name)
			require.Equal(t, 2, code, "a topic is no command")
			require.Contains(t, stderr, `unknown command "`+name+`"`)
		})
	}
}

// TestTheHelpTopicsExamplesAreCommandsThatParse checks each plugvisor
// command line of every topic's examples against the CLI: the command
// exists and takes every flag given (run with -h, so nothing is sent).
func TestTheHelpTopicsExamplesAreCommandsThatParse(t *testing.T) {
	for _, topic := range helpTopics() {
		lines := strings.ReplaceAll(topic.Example, "\\\n", " ")
		checked := 0
		for _, line := range strings.Split(lines, "\n") {
			args, ok := strings.CutPrefix(strings.TrimSpace(line), "plugvisor ")
			if !ok {
				continue
			}
			checked++
			stdout, stderr, code := runHere(append(strings.Fields(args), "-h")...)
			require.Zero(t, code, "%s: %s", line, stderr)
			require.Contains(t, stdout, "Usage:", line)
		}
		require.NotZero(t, checked, "the topic %s shows a plugvisor command", topic.Name())
	}
}

// TestTheManPagesCoverEveryCommandAndTopic writes the man pages as make
// man does, and finds one for every command and help topic, each with its
// description and its flags.
func TestTheManPagesCoverEveryCommandAndTopic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600") // 2026-01-01
	stdout, stderr, code := cli(t, "man", dir)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "man pages into "+dir)
	for _, path := range allCommands() {
		page := filepath.Join(dir, strings.Join(append([]string{"plugvisor"}, path...), "-")+".1")
		if len(path) > 0 && (path[len(path)-1] == "help") {
			continue
		}
		text, err := os.ReadFile(page)
		require.NoError(t, err, "no man page for plugvisor %s", strings.Join(path, " "))
		require.Contains(t, string(text), `.TH "`, page)
		require.Contains(t, string(text), "Jan 2026", "the date of SOURCE_DATE_EPOCH")
	}
	agent, err := os.ReadFile(filepath.Join(dir, "plugvisor-agent.1"))
	require.NoError(t, err)
	require.Contains(t, string(agent), `\fB--config\fP`)
	require.Contains(t, string(agent), "SIGHUP")
	require.Contains(t, string(agent), "a durable registry in <data-dir>/state.db", "angle brackets survive Markdown")
	require.Contains(t, string(agent), "the plugvisor_volume_stats_* metrics", "underscores survive Markdown")
	for _, name := range []string{"volumes", "claims", "fleet", "tokens"} {
		text, err := os.ReadFile(filepath.Join(dir, "plugvisor-"+name+".1"))
		require.NoError(t, err, "no man page for the topic %s", name)
		require.Contains(t, string(text), "EXAMPLE")
	}
	_, err = os.Stat(filepath.Join(dir, "plugvisor-man.1"))
	require.ErrorIs(t, err, os.ErrNotExist, "the hidden man command has no page")
}
