// Package racelog lets tests run race-enabled child processes that use
// protoactor's cluster, which has data races of its own at our version
// (its block list is read without its lock while gossip writes it): the
// child logs its race reports to files instead of exiting with the race
// detector's code, and the test then fails on the reports that touch our
// code and only notes those wholly inside other modules.
package racelog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// module marks the frames of this module.
const module = "github.com/plugvisor/plugvisor/"

// Env is the GORACE setting for a child process whose race reports go to
// files under dir (dir/race.<pid>) and do not change its exit code.
func Env(dir string) string {
	return "GORACE=exitcode=0 log_path=" + filepath.Join(dir, "race")
}

// Reports reads the race reports written under dir and splits them: ours
// are the reports one of whose two accesses is in this module's code (a
// test must fail on them), theirs name the two functions of each other
// race.
func Reports(dir string) (ours, theirs []string, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "race.*"))
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("racelog: %w", err)
		}
		for _, report := range strings.Split(string(b), "==================") {
			if !strings.Contains(report, "DATA RACE") {
				continue
			}
			tops := accessTops(report)
			if slices.ContainsFunc(tops, func(f string) bool { return strings.Contains(f, module) }) {
				ours = append(ours, report)
				continue
			}
			theirs = append(theirs, strings.Join(tops, " vs "))
		}
	}
	return ours, theirs, nil
}

// accessTops are the functions that made the two accesses of a race
// report: the first frame of each access stack that is not the race
// detector's own.
func accessTops(report string) []string {
	var tops []string
	lines := strings.Split(report, "\n")
	for i, line := range lines {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, "Read at") && !strings.HasPrefix(l, "Write at") && !strings.HasPrefix(l, "Previous ") {
			continue
		}
		for _, frame := range lines[i+1:] {
			f := strings.TrimSpace(frame)
			if f != "" && !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "/") && !strings.HasPrefix(f, "<") {
				tops = append(tops, f)
				break
			}
		}
	}
	return tops
}
