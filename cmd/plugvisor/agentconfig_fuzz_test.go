package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzAgentConfig: an agent config file, whatever its bytes, is loaded
// and applied to the agent's flags, or refused with a usage error
// ("-config: ..."), and a refusal never shows a value. file is the
// file's text with each "@" standing for secret, a value of 8 to 64
// letters, digits, "-" and "_" found nowhere else in the file; the value
// is checked for when every "@" is inside double quotes, and the file has
// no interpolation.
func FuzzAgentConfig(f *testing.F) {
	for _, seed := range []string{
		`node_id = "@"`, `http_max_conns = "@"`, `resync_interval = "@"`, `token = "@"`,
		`plugin_dir = ["@", 3]`, `docker_dirs = "@"`, `max_volumes = "@"`, `data_dir = ["@"]`,
		"node_id = \"@\nlog_level = \"debug\"", `cluster { etcd = "@" }`, `node_id = "a"` + "\n" + `node_id = "@"`,
		`x = upper("@")`, `log_level = "@"`,
	} {
		f.Add(seed, "s3cret-Value_9")
	}
	f.Fuzz(func(t *testing.T, file, secret string) {
		if len(secret) < 8 || len(secret) > 64 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" ||
			strings.Contains(file, secret) {
			return
		}
		text := strings.ReplaceAll(file, "@", secret)
		dir := t.TempDir()
		path := filepath.Join(dir, "c.hcl")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		fs := newAgentCmd().Flags()
		cfg, err := loadConfig(path, fs)
		if err == nil {
			err = cfg.apply(fs)
		}
		if err == nil {
			return
		}
		msg := strings.ReplaceAll(err.Error(), dir, "")
		if !strings.HasPrefix(msg, "-config: ") {
			t.Fatalf("refused with an error that does not name -config: %v", err)
		}
		if onlyInStrings(file, '@') && !strings.Contains(text, "${") && !strings.Contains(text, "%{") && strings.Contains(msg, secret) {
			t.Fatalf("the refusal shows the value %q: %v", secret, err)
		}
	})
}

// onlyInStrings reports whether c occurs in file, and only inside double
// quotes: in a value, not a key, whose name a refusal shows.
func onlyInStrings(file string, c byte) bool {
	in, seen := false, false
	for i := 0; i < len(file); i++ {
		switch {
		case file[i] == '\\' && in:
			i++
		case file[i] == '"':
			in = !in
		case file[i] == c:
			if !in {
				return false
			}
			seen = true
		}
	}
	return seen
}
