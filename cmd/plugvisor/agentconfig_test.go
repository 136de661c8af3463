package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// writeFiles writes name → content files into a new temp dir and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	return dir
}

// agentFlags are the flags of a new agent command, as the command line
// args set them.
func agentFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := newAgentCmd().Flags()
	require.NoError(t, fs.Parse(args))
	return fs
}

// docsConfigExample is the HCL block of docs/agent.md marked
// <!-- agent-config -->.
func docsConfigExample(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("../../docs/agent.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- agent-config -->\n```hcl\n(.*?)```\n").FindSubmatch(text)
	require.NotNil(t, m, "docs/agent.md has a ```hcl block marked <!-- agent-config -->")
	return string(m[1])
}

// TestTheDocsConfigExampleSetsEveryAgentFlag loads the annotated example of
// docs/agent.md as written: it must set every flag of the agent (so the
// docs list every key), and each value must reach the flag.
func TestTheDocsConfigExampleSetsEveryAgentFlag(t *testing.T) {
	dir := writeFiles(t, map[string]string{"agent.hcl": docsConfigExample(t)})
	fs := agentFlags(t)
	file, err := loadConfig(filepath.Join(dir, "agent.hcl"), fs)
	require.NoError(t, err)
	require.NoError(t, file.apply(fs))
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(notConfigKeys, f.Name) {
			require.True(t, f.Changed, "docs/agent.md's example has no key %s", configKey(f.Name))
		}
	})
	require.Equal(t, "/var/lib/plugvisor", fs.Lookup("data-dir").Value.String())
	require.Equal(t, "[/run/csi/plugins]", fmtList(fs, "plugin-dir"))
	require.Equal(t, "true", fs.Lookup("log-json").Value.String())
	require.Equal(t, "1m0s", fs.Lookup("volume-stats-interval").Value.String())
	require.Equal(t, "64", fs.Lookup("http-max-streams").Value.String())
}

func fmtList(fs *pflag.FlagSet, name string) string {
	return "[" + fs.Lookup(name).Value.String() + "]"
}

func TestAFlagOnTheCommandLineOverridesTheFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{"a.hcl": `
log_level  = "debug"
data_dir   = "/from/file"
plugin_dir = ["/file/a", "/file/b"]
spec_dir   = ["/file/specs"]
`})
	fs := agentFlags(t, "--data-dir", "/from/flag", "--plugin-dir", "/flag/a")
	file, err := loadConfig(filepath.Join(dir, "a.hcl"), fs)
	require.NoError(t, err)
	require.NoError(t, file.apply(fs))
	require.Equal(t, "/from/flag", fs.Lookup("data-dir").Value.String())
	require.Equal(t, "/flag/a", fs.Lookup("plugin-dir").Value.String(), "a repeatable flag given takes nothing from the file")
	require.Equal(t, "/file/specs", fs.Lookup("spec-dir").Value.String())
	require.Equal(t, "debug", fs.Lookup("log-level").Value.String())
}

func TestADirectoryLoadsItsHCLFilesInLexicalOrderAndALaterFileWins(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"10-base.hcl":  "log_level = \"warn\"\nnode_id = \"n1\"\nhttp_max_conns = 10\n",
		"50-later.hcl": "log_level = \"debug\"\n",
		"9-first.hcl":  "log_level = \"error\"\nmax_volumes = 7\n", // "9" sorts after "50"
		"notes.txt":    "not = hcl at all {",
	})
	fs := agentFlags(t)
	file, err := loadConfig(dir, fs)
	require.NoError(t, err)
	require.NoError(t, file.apply(fs))
	require.Equal(t, []string{filepath.Join(dir, "10-base.hcl"), filepath.Join(dir, "50-later.hcl"), filepath.Join(dir, "9-first.hcl")}, file.files)
	require.Equal(t, "error", fs.Lookup("log-level").Value.String())
	require.Equal(t, "n1", fs.Lookup("node-id").Value.String())
	require.Equal(t, "7", fs.Lookup("max-volumes").Value.String())
	require.Equal(t, "10", fs.Lookup("http-max-conns").Value.String())
}

// TestABadConfigIsRefusedNamingFileLineAndColumn checks each kind of
// mistake: the error names where it is, what is wrong and the remedy, and
// never the value (which may be a secret put in the wrong place).
func TestABadConfigIsRefusedNamingFileLineAndColumn(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"an unknown key, with the key it is closest to", "node_id = \"n\"\nlog_levle = \"debug\"\n",
			[]string{`c.hcl:2:1: unknown key "log_levle" (did you mean "log_level"?)`}},
		{"a token given inline", "token = \"s3cret-value\"\n",
			[]string{`c.hcl:1:1: unknown key "token"`, "token_file names the file"}},
		{"a key spelt with dashes", "data-dir = \"/x\"\n", []string{`c.hcl:1:1: unknown key "data-dir" (did you mean "data_dir"?)`}},
		{"a flag that reads the config is no key", "config = \"/etc/x.hcl\"\n", []string{`c.hcl:1:1: unknown key "config"`}},
		{"a string where a number goes", "\n  http_max_conns = \"s3cret-value\"\n", []string{"c.hcl:2:20: http_max_conns: want a whole number, got string"}},
		{"a fraction where a count goes", "max_volumes = 1.5\n", []string{"c.hcl:1:15: max_volumes: want a whole number"}},
		{"a number where a string goes", "data_dir = 5\n", []string{"c.hcl:1:12: data_dir: want a string in double quotes, got number"}},
		{"a string where a switch goes", "docker_dirs = \"yes\"\n", []string{"c.hcl:1:15: docker_dirs: want true or false, got string"}},
		{"a bad duration", "resync_interval = \"s3cret-value\"\n", []string{`c.hcl:1:19: resync_interval: want a duration such as "30s" or "5m"`}},
		{"a bare number as a duration", "resync_interval = 30\n", []string{`c.hcl:1:19: resync_interval: want a duration in double quotes`}},
		{"a string where a list goes", "plugin_dir = \"/a\"\n", []string{`c.hcl:1:14: plugin_dir: want a list of strings`}},
		{"a list with a number in it", "plugin_dir = [\"/a\", 3]\n", []string{`c.hcl:1:14: plugin_dir: want a list of strings, e.g. ["a", "b"]; an element is number`}},
		{"null", "node_id = null\n", []string{"c.hcl:1:11: node_id is null"}},
		{"a block", "cluster {\n  etcd = \"x\"\n}\n", []string{`c.hcl:1:1: Unexpected "cluster" block`}},
		{"a key twice", "node_id = \"a\"\nnode_id = \"b\"\n", []string{"c.hcl:2:1: Attribute redefined"}},
		{"a syntax error", "node_id = \"a\n", []string{"c.hcl:1:"}},
		{"a variable", "node_id = hostname\n", []string{"c.hcl:1:11: Variables not allowed"}},
		{"every problem at once", "a = 1\nb = 2\n", []string{`c.hcl:1:1: unknown key "a"`, `c.hcl:2:1: unknown key "b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{"c.hcl": tc.file})
			path := filepath.Join(dir, "c.hcl")
			_, err := loadConfig(path, agentFlags(t))
			require.Error(t, err)
			msg := strings.ReplaceAll(err.Error(), dir+"/", "")
			require.True(t, strings.HasPrefix(msg, "-config: "), msg)
			for _, want := range tc.want {
				require.Contains(t, msg, want)
			}
			require.NotContains(t, msg, "s3cret", "the error shows no value")
		})
	}
}

func TestAConfigPathThatIsMissingOrAnEmptyDirectoryIsRefused(t *testing.T) {
	_, err := loadConfig(filepath.Join(t.TempDir(), "nope.hcl"), agentFlags(t))
	require.ErrorContains(t, err, "-config: stat ")
	empty := t.TempDir()
	_, err = loadConfig(empty, agentFlags(t))
	require.ErrorContains(t, err, "the directory holds no *.hcl file")
}

// TestValidateChecksWithoutStarting runs plugvisor agent -validate: a good
// config says so and starts nothing; a bad one is refused with the flag's
// name, as a start would be.
func TestValidateChecksWithoutStarting(t *testing.T) {
	data := t.TempDir()
	dir := writeFiles(t, map[string]string{
		"good.hcl":  "data_dir = \"" + data + "\"\nlog_level = \"debug\"\n",
		"level.hcl": "log_level = \"loud\"\n",
		"neg.hcl":   "volume_op_timeout = \"-1s\"\n",
	})
	stdout, stderr, code := runHere("agent", "-config", filepath.Join(dir, "good.hcl"), "-validate")
	require.Zero(t, code, stderr)
	require.Equal(t, "the config is valid: 2 keys from "+filepath.Join(dir, "good.hcl")+"\n", stdout)
	entries, err := os.ReadDir(data)
	require.NoError(t, err)
	require.Empty(t, entries, "-validate created nothing in the data dir")

	_, stderr, code = runHere("agent", "-config", filepath.Join(dir, "level.hcl"), "-validate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `-log-level "loud": want trace, debug, info, warn or error`)

	_, stderr, code = runHere("agent", "-config", filepath.Join(dir, "neg.hcl"), "-validate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "-volume-op-timeout is -1s: give 0 or more")

	_, stderr, code = runHere("agent", "-config", filepath.Join(dir, "level.hcl"), "-log-level", "warn", "-validate")
	require.Zero(t, code, "the command line's -log-level overrides the file's: %s", stderr)
}

// TestClusterDurationsAreRefusedByTheirFlagsBeforeJoining checks the
// cluster durations on the command line: each bad one is named by its
// flag, with -validate as without it, and nothing dials etcd (the URL
// given would hang).
func TestClusterDurationsAreRefusedByTheirFlagsBeforeJoining(t *testing.T) {
	cluster := []string{"agent", "-data-dir", t.TempDir(), "-cluster-etcd", "http://192.0.2.1:2379",
		"-cluster-address", "127.0.0.1:0", "-cluster-insecure"}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"-cluster-lease-ttl", "1s"}, "-cluster-lease-ttl is 1s: give whole seconds, at least 2s"},
		{[]string{"-cluster-lease-ttl", "2500ms"}, "-cluster-lease-ttl is 2.5s: give whole seconds"},
		{[]string{"-cluster-gc-grace", "-5m"}, "-cluster-gc-grace is -5m0s: give a positive duration, or 0 for the default 5m0s"},
		{[]string{"-cluster-gc-interval", "-1s"}, "-cluster-gc-interval is -1s: give a positive duration, or 0 for no GC on this node"},
		{[]string{"-cluster-fence-margin", "-1s"}, "-cluster-fence-margin is -1s"},
		{[]string{"-cluster-compact-interval", "-1s"}, "-cluster-compact-interval is -1s"},
		{[]string{"-cluster-gc-grace", "12s"}, "-cluster-gc-grace 12s must be longer than -cluster-lease-ttl 10s plus -cluster-fence-margin 5s"},
	} {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			for _, extra := range [][]string{nil, {"-validate"}} {
				start := time.Now()
				_, stderr, code := runHere(append(append(slices.Clone(cluster), tc.flags...), extra...)...)
				require.Equal(t, 2, code, stderr)
				require.Contains(t, stderr, tc.want)
				require.NotContains(t, stderr, "Cluster.", "no Go field names")
				require.Less(t, time.Since(start), 20*time.Second, "refused before dialling etcd")
			}
		})
	}
}

// TestThePackagedConfigLoads loads packaging/agent.hcl, the file make
// install puts in /etc/plugvisor for the systemd unit.
func TestThePackagedConfigLoads(t *testing.T) {
	fs := agentFlags(t)
	file, err := loadConfig("../../packaging/agent.hcl", fs)
	require.NoError(t, err)
	require.NoError(t, file.apply(fs))
	require.Equal(t, "/var/lib/plugvisor", fs.Lookup("data-dir").Value.String(), "the unit's StateDirectory")
}
