package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/internal/sdnotify"
)

// reloadable are the config keys a running agent takes on at SIGHUP. The
// log level changes nothing but what is written; every other key
// (listeners, directories, limits, the fleet) shapes a part that runs,
// and takes effect at the next start. Besides the keys, SIGHUP reads the
// token file again: its path stays, its tokens change.
var reloadable = []string{"log-level"}

// reloader acts on SIGHUP: it reads the token file again, when the agent
// has one, and re-reads the agent's -config to apply what may change while
// the agent runs: the log level, unless the command line set it. It logs
// the other keys that changed, which wait for a restart.
type reloader struct {
	// path is -config, "" when the agent was started without one.
	path string
	// given are the flags of the command line, which the file never
	// overrides.
	given map[string]bool
	// loaded is what the file set at start or at the last reload.
	loaded configFile
	logger hclog.Logger
	// tokens reads the token file again (agent.ReloadTokens); nil without
	// one.
	tokens func() (int, error)
}

// givenFlags are the flags of fs that the command line set.
func givenFlags(fs *pflag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	return given
}

// reload reads the config again and applies it. A file that no longer
// loads changes nothing, and says why.
func (r *reloader) reload() {
	if r.tokens != nil {
		if n, err := r.tokens(); err != nil {
			r.logger.Warn("SIGHUP: the token file was not reloaded; the tokens in force stay", "error", err)
		} else {
			r.logger.Info("SIGHUP: token file reloaded", "tokens", n)
		}
	}
	if r.path == "" {
		if r.tokens == nil {
			r.logger.Info("SIGHUP: nothing to reload: the agent was started without -config or -token-file")
		}
		return
	}
	fs := newAgentCmd().Flags()
	file, err := loadConfig(r.path, fs)
	if err != nil {
		r.logger.Warn("SIGHUP: the config was not reloaded; the agent runs on unchanged", "error", err)
		return
	}
	level := hclog.Info
	if v, ok := file.values["log-level"]; ok && !r.given["log-level"] {
		if level = hclog.LevelFromString(v.values[0]); level == hclog.NoLevel {
			r.logger.Warn("SIGHUP: the config was not reloaded; the agent runs on unchanged",
				"error", fmt.Sprintf("%s: log_level: want trace, debug, info, warn or error", position(v.where)))
			return
		}
	}
	if !r.given["log-level"] && level != r.logger.GetLevel() {
		r.logger.SetLevel(level)
		r.logger.Info("SIGHUP: log level changed", "log_level", level.String())
	}
	if later := r.changed(file); len(later) > 0 {
		r.logger.Warn("SIGHUP: these keys changed and take effect at the next start", "keys", strings.Join(later, ", "))
	}
	r.loaded = file
	r.logger.Info("SIGHUP: config reloaded", "config", r.path)
}

// changed are the keys, other than reloadable ones and those the command
// line overrides, whose value differs between the loaded file and file.
func (r *reloader) changed(file configFile) []string {
	var keys []string
	names := slices.Sorted(maps.Keys(file.values))
	for name := range r.loaded.values {
		if _, ok := file.values[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		if slices.Contains(reloadable, name) || r.given[name] {
			continue
		}
		if !slices.Equal(r.loaded.values[name].values, file.values[name].values) {
			keys = append(keys, configKey(name))
		}
	}
	return keys
}

// notify tells systemd the agent's state, when it runs under systemd.
func notify(log hclog.Logger, states ...string) {
	if _, err := sdnotify.Notify(states...); err != nil {
		log.Warn("could not tell systemd the agent's state", "error", err)
	}
}

// validateConfig checks cfg as far as it can without starting anything,
// and says what it read.
func validateConfig(cfg agent.Config, r *reloader, stdout io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.TokenFile != "" {
		if _, err := api.LoadTokens(cfg.TokenFile); err != nil {
			return fmt.Errorf("-token-file: %w", err)
		}
	}
	if r.path == "" {
		_, err := fmt.Fprintln(stdout, "the flags are valid (no -config given)")
		return err
	}
	_, err := fmt.Fprintf(stdout, "the config is valid: %s from %s\n", count(len(r.loaded.values), "key"), strings.Join(r.loaded.files, ", "))
	return err
}
