package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rogpeppe/go-internal/txtar"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/internal/mountinfo"
	"github.com/plugvisor/plugvisor/internal/racelog"
)

// The command blocks of the README and of docs/*.md marked
// <!-- testscript:NAME --> run as the testscript files
// testdata/readme/NAME.txtar, against a real agent and
// real plugin processes (the plugvisor binary TestMain built, on PATH).
// TestTheReadmeBlocksAreTheScripts keeps each block and its script in step.

const readmeScripts = "testdata/readme"

// TestTheReadmeBlocksRunAsWritten runs each README block's script: the
// commands as the README writes them, each checked for what the README
// shows it printing, with a fresh data dir as $PLUGVISOR_DATA_DIR.
func TestTheReadmeBlocksRunAsWritten(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: readmeScripts,
		Setup: func(env *testscript.Env) error {
			// Short: the API socket's path must fit in 107 bytes.
			dir, err := os.MkdirTemp("", "pv")
			if err != nil {
				return err
			}
			env.Setenv(agent.DataDirEnv, dir)
			// The fleet block's etcd listens where the README's export
			// says; here, on ports free a moment ago, with TLS (plainhttp
			// makes them http:// for a demo without).
			for _, name := range []string{"ETCD", "ETCD_PEER"} {
				url, err := freeLoopbackURL()
				if err != nil {
					return err
				}
				env.Setenv(name, url)
			}
			env.Setenv("PATH", filepath.Dir(binary)+string(os.PathListSeparator)+env.Getenv("PATH"))
			races := filepath.Join(env.WorkDir, ".races")
			if err := os.Mkdir(races, 0o700); err != nil {
				return err
			}
			gorace, _ := strings.CutPrefix(racelog.Env(races), "GORACE=")
			env.Setenv("GORACE", gorace)
			env.Defer(func() { checkRaces(env.T(), races) })
			env.Defer(func() {
				// After the background commands stopped: unmount whatever a
				// failed run left, so that removing dir cannot reach through.
				if err := unmountAllUnder(dir); err != nil {
					env.T().Fatal(err)
				}
				os.RemoveAll(dir)
			})
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"plainhttp":   plainHTTP,
			"shows":       showsOutput,
			"schedulable": waitSchedulable,
			"nomounts": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: nomounts DIR")
				}
				mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, args[0])
				ts.Check(err)
				if len(mounts) > 0 {
					ts.Fatalf("still mounted under %s: %v", args[0], mounts)
				}
			},
		},
	})
}

// scriptStep is one command of a README block or a script, and what it
// must print. A block's want are its lines as the README shows them; a
// script's are the patterns of its stdout and stderr checks, or, when
// whole, the lines of the file its shows check compares the whole output
// with.
type scriptStep struct {
	command string
	want    []string
	whole   bool
}

// TestTheReadmeBlocksAreTheScripts checks that every block of README.md
// and docs/*.md marked <!-- testscript:NAME --> has its script, and the script every block: the
// same commands, verbatim and in order, each checked for the lines the
// README shows it printing ("..." stands for anything).
func TestTheReadmeBlocksAreTheScripts(t *testing.T) {
	blocks := readmeBlocks(t)
	scripts, err := filepath.Glob(filepath.Join(readmeScripts, "*.txtar"))
	require.NoError(t, err)
	require.Len(t, scripts, len(blocks), "one script per block of README.md and docs/: %v", scripts)
	for name, block := range blocks {
		t.Run(name, func(t *testing.T) {
			steps := scriptSteps(t, filepath.Join(readmeScripts, name+".txtar"))
			require.Equal(t, asScripted(block, steps), steps, "the block %q (README.md or docs/) and %s/%s.txtar differ", name, readmeScripts, name)
		})
	}
}

// docFiles are the files whose command blocks run as scripts: the README
// and every page of docs/, relative to this package.
func docFiles(t *testing.T) []string {
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ has no pages")
	return append([]string{"../../README.md"}, pages...)
}

// readmeBlocks reads every ```sh block marked <!-- testscript:NAME --> in
// README.md and docs/*.md. A "# " line right under a command is what it
// prints; other comments and blank lines are prose. A block exports the
// data dir first. A name marks one block only, across every file; later
// blocks of the same page marked <!-- testscript:NAME continued --> go on
// with its session, in the same shell, as a reader runs them in order.
func readmeBlocks(t *testing.T) map[string][]scriptStep {
	blocks := map[string][]scriptStep{}
	where := map[string]string{}
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, addBlocks(blocks, where, file, fileBlocks(t, file, string(text))))
	}
	require.NotEmpty(t, blocks, "README.md and docs/ have no testscript blocks")
	return blocks
}

// addBlocks adds one file's blocks to blocks, and where each came from to
// where; a name that marks a block of another file already is an error.
func addBlocks(blocks map[string][]scriptStep, where map[string]string, file string, add map[string][]scriptStep) error {
	for name := range add {
		if other, ok := where[name]; ok {
			return fmt.Errorf("the block name %q marks a block in %s and in %s: give one another name", name, other, file)
		}
	}
	for name, steps := range add {
		where[name] = file
		blocks[name] = steps
	}
	return nil
}

// fileBlocks reads the testscript blocks of one file, named by file in
// errors.
func fileBlocks(t *testing.T, file, text string) map[string][]scriptStep {
	marker := regexp.MustCompile("<!-- testscript:([a-z-]+)( continued)? -->\n```sh\n")
	blocks := map[string][]scriptStep{}
	for _, m := range marker.FindAllStringSubmatchIndex(text, -1) {
		name, continued := text[m[2]:m[3]], m[4] >= 0
		block, _, found := strings.Cut(text[m[1]:], "```\n")
		require.True(t, found, "%s: the block %q is not closed", file, name)
		lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
		if continued {
			require.Contains(t, blocks, name, "%s: a block continues %q, which no block above starts", file, name)
		} else {
			require.NotContains(t, blocks, name, "%s marks two blocks %q: give one another name, or mark the later one continued", file, name)
			require.True(t, strings.HasPrefix(lines[0], "export "+agent.DataDirEnv+"="),
				"%s: the block %q exports %s first, so that it runs as written", file, name, agent.DataDirEnv)
			lines = lines[1:]
		}
		steps := blocks[name]
		inOutput := false
		for _, line := range lines {
			switch {
			case strings.TrimSpace(line) == "":
				inOutput = false
			case strings.HasPrefix(line, "#"):
				if inOutput {
					last := &steps[len(steps)-1]
					last.want = append(last.want, shownLine(line))
				}
			case strings.HasPrefix(line, "plugvisor "), strings.HasPrefix(line, "curl "), strings.HasPrefix(line, "export "):
				steps = append(steps, scriptStep{command: line})
				inOutput = !strings.HasSuffix(line, " &") && !strings.HasPrefix(line, "export ")
			default:
				t.Fatalf("%s: the block %q has a line that is neither a plugvisor or curl command, an export, nor a comment: %q", file, name, line)
			}
		}
		require.NotEmpty(t, steps, "%s: %s", file, name)
		blocks[name] = steps
	}
	return blocks
}

// TestABlockNameMarksOneBlockAcrossTheFiles checks that a name used in
// README.md and again in a page of docs/ is refused, naming both files.
func TestABlockNameMarksOneBlockAcrossTheFiles(t *testing.T) {
	blocks, where := map[string][]scriptStep{}, map[string]string{}
	step := []scriptStep{{command: "plugvisor agent &"}}
	require.NoError(t, addBlocks(blocks, where, "README.md", map[string][]scriptStep{"plugins": step}))
	err := addBlocks(blocks, where, "docs/agent.md", map[string][]scriptStep{"agent": step, "plugins": step})
	require.ErrorContains(t, err, `the block name "plugins" marks a block in README.md and in docs/agent.md`)
	require.Equal(t, map[string]string{"plugins": "README.md"}, where, "nothing of the refused file is added")
	require.NoError(t, addBlocks(blocks, where, "docs/agent.md", map[string][]scriptStep{"agent": step}))
	require.Len(t, blocks, 2)
}

// scriptSteps reads a script's exec and env lines, and the stdout and
// stderr patterns or the shows check under each; its other lines
// (comments, conditions, checks of its own) are not in the README.
func scriptSteps(t *testing.T, path string) []scriptStep {
	archive, err := txtar.ParseFile(path)
	require.NoError(t, err)
	var steps []scriptStep
	lines := bufio.NewScanner(bytes.NewReader(archive.Comment))
	for lines.Scan() {
		line := strings.TrimPrefix(lines.Text(), "! ")
		if command, ok := strings.CutPrefix(line, "exec "); ok {
			steps = append(steps, scriptStep{command: namedBackground.ReplaceAllString(command, "&")})
			continue
		}
		if assignment, ok := strings.CutPrefix(line, "env "); ok {
			steps = append(steps, scriptStep{command: "export " + assignment})
			continue
		}
		if args, ok := strings.CutPrefix(line, "shows "); ok {
			require.NotEmpty(t, steps, "%s: a check before the first command", path)
			last := &steps[len(steps)-1]
			last.want, last.whole = append(last.want, archiveLines(t, archive, path, strings.Fields(args))...), true
			continue
		}
		for _, check := range []string{"stdout ", "stderr "} {
			if quoted, ok := strings.CutPrefix(line, check); ok {
				require.NotEmpty(t, steps, "%s: a check before the first command", path)
				last := &steps[len(steps)-1]
				last.want = append(last.want, unquote(t, quoted))
			}
		}
	}
	require.NoError(t, lines.Err())
	return steps
}

// namedBackground is a script's named background command's last token,
// which stands for the README's "&".
var namedBackground = regexp.MustCompile(`&[a-z0-9]+&$`)

// unquote undoes testscript's single quotes, inside which a doubled quote
// stands for one.
func unquote(t *testing.T, s string) string {
	require.True(t, len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'', "a check's pattern is single-quoted: %s", s)
	return strings.ReplaceAll(s[1:len(s)-1], "''", "'")
}

// wantPattern turns a line the README shows into the pattern its script
// checks: literal, but "..." matches anything.
func wantPattern(want string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(want), `\.\.\.`, `.*`)
}

// unmountAllUnder lazily unmounts whatever is mounted under dir.
func unmountAllUnder(dir string) error {
	for {
		mounts, err := mountinfo.PointsUnder(mountinfo.DefaultPath, dir)
		if err != nil || len(mounts) == 0 {
			return err
		}
		for m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				return fmt.Errorf("unmounting %s left by the script: %w", m, err)
			}
		}
	}
}

// waitSchedulable is the script command "schedulable DATADIR VOLUME NODES":
// it waits up to a minute until the agent of DATADIR says the default
// namespace's VOLUME is schedulable with NODES healthy nodes, as a reader
// of the README waits for "volume status" to say so.
func waitSchedulable(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: schedulable DATADIR VOLUME NODES")
	}
	nodes, err := strconv.Atoi(args[2])
	ts.Check(err)
	c := newClient(args[0])
	var v api.VolumeJSON
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = c.call(ctx, "GET", volumePath("default", args[1], ""), nil, nil, &v)
		cancel()
		if err == nil && v.Schedulable && v.NodesHealthy == nodes {
			return
		}
	}
	ts.Fatalf("volume %s was not schedulable on %d nodes within a minute: %+v, %v", args[1], nodes, v, err)
}

// freeLoopbackURL is an https URL on a loopback port that was free a
// moment ago.
func freeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "https://" + l.Addr().String(), nil
}

// plainHTTP is the script command "plainhttp VAR...": each variable's
// https:// URL becomes http://, for a block that runs without TLS.
func plainHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: plainhttp VAR...")
	}
	for _, name := range args {
		url, ok := strings.CutPrefix(ts.Getenv(name), "https://")
		if !ok {
			ts.Fatalf("plainhttp: $%s is %q, not an https:// URL", name, ts.Getenv(name))
		}
		ts.Setenv(name, "http://"+url)
	}
}
