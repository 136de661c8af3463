package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/agent"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/dockervolume"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const pluginLong = `Plugins are registered by allocation: each running copy of a plugin is one
allocation (TYPE NAME ALLOC), and the newest registration of a name is its
current allocation, the one the agent serves. Discovery registers the
plugins it finds in <data-dir>/plugins and <data-dir>/specs by itself;
"register" is for a plugin served elsewhere.`

const pluginExample = `  plugvisor plugin list -type csi-node
  plugvisor plugin wait csi-node hostpath
  plugvisor plugin status -json csi-node hostpath
  plugvisor plugin status
  plugvisor plugin status hostpath
  plugvisor plugin expect hostpath -nodes 3 -controllers 1
  plugvisor plugin register -type csi-node -name ebs -alloc a1 -socket /run/csi/ebs-a1.sock
  plugvisor plugin deregister csi-node ebs a1
  plugvisor plugin capacity -capability access=single-node-writer hostpath`

func newPluginCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "plugin",
		Short:   "list, inspect, register, deregister and wait for plugins",
		Long:    pluginLong,
		Example: pluginExample,
	}
	cmd.AddCommand(newPluginListCmd(), newPluginStatusCmd(), newPluginRegisterCmd(), newPluginDeregisterCmd(), newPluginWaitCmd(),
		newPluginCapacityCmd(), newPluginExpectCmd())
	return cmd
}

func newPluginListCmd() *cobra.Command {
	var common commonFlags
	var ptype string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "the current allocation of every plugin",
		Example: "  plugvisor plugin list\n  plugvisor plugin list -type csi-node -json",
		Args:    cmdline.Args("", "plugvisor plugin list -type csi-node"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return pluginList(cmd.Context(), common, ptype, cmd.OutOrStdout())
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().StringVar(&ptype, "type", "", "only plugins of this type, e.g. csi-node")
	return cmd
}

func newPluginStatusCmd() *cobra.Command {
	var common commonFlags
	cmd := &cobra.Command{
		Use:   "status [[TYPE] NAME]",
		Short: "CSI plugins' healthy and expected counts (every one, or NAME's); with TYPE, a plugin's allocations",
		Long:  pluginStatusLong,
		Example: "  plugvisor plugin status\n  plugvisor plugin status hostpath\n" +
			"  plugvisor plugin status csi-node hostpath\n  plugvisor plugin status -json csi-node hostpath",
		Args: statusArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return pluginViews(cmd.Context(), common, cmd.OutOrStdout())
			case 1:
				return pluginView(cmd.Context(), common, args[0], cmd.OutOrStdout())
			}
			return pluginStatus(cmd.Context(), common, args[0], args[1], cmd.OutOrStdout())
		},
	}
	common.register(cmd.Flags())
	return cmd
}

func newPluginRegisterCmd() *cobra.Command {
	var common commonFlags
	var p pluginJSON
	var socket string
	var options stringList
	var force bool
	cmd := &cobra.Command{
		Use:   "register -type T -name N -alloc A -socket PATH",
		Short: "register one allocation of a plugin served elsewhere",
		Long: `Registers an allocation of a plugin that discovery does not find: a plugin
served outside <data-dir>/plugins, by an orchestrator say. The new
allocation becomes the plugin's current one. When the plugin already has a
healthy current allocation, register refuses, says which, and registers
only with -force: a socket nobody serves would replace a working plugin.`,
		Example: `  plugvisor plugin register -type csi-node -name ebs -alloc a1 -socket /run/csi/ebs-a1.sock
  plugvisor plugin register -type csi-node -name ebs -alloc a2 -socket /run/csi/ebs-a2.sock -version 1.2.0 -force`,
		Args: cmdline.Args("", "plugvisor plugin register -type csi-node -name ebs -alloc a1 -socket /run/csi/ebs-a1.sock"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return usageError("register needs -socket PATH (the plugin's unix socket)")
			}
			p.Connection = map[string]any{"socket_path": socket}
			for _, o := range options {
				k, v, ok := strings.Cut(o, "=")
				if !ok {
					return usageError("-option %q: want key=value", o)
				}
				if p.Options == nil {
					p.Options = map[string]string{}
				}
				p.Options[k] = v
			}
			return pluginRegister(cmd.Context(), common, p, force, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	common.register(fs)
	fs.StringVar(&p.Type, "type", "", "plugin type, e.g. csi-node")
	fs.StringVar(&p.Name, "name", "", "plugin name")
	fs.StringVar(&p.AllocID, "alloc", "", "allocation ID of this running copy")
	fs.StringVar(&p.Version, "version", "", "plugin version")
	fs.StringVar(&socket, "socket", "", "absolute unix socket path, at most 107 bytes")
	fs.Var(&options, "option", "key=value option (repeatable)")
	fs.BoolVar(&force, "force", false, "register even when it replaces a healthy current allocation")
	cmdline.Require(cmd, "type", "name", "alloc")
	return cmd
}

func newPluginDeregisterCmd() *cobra.Command {
	var common commonFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "deregister TYPE NAME ALLOC",
		Short: "remove one allocation of a plugin",
		Long: `Removes one allocation of a plugin. When it is the plugin's current
allocation, found healthy, and its plugin still serves its socket,
deregister refuses, says why, and deregisters only with -force: the next
registration would otherwise become current without -force. Stop the
plugin first, and no -force is needed.`,
		Example: `  plugvisor plugin deregister csi-node ebs a1
  plugvisor plugin deregister -force csi-node ebs a2`,
		Args: cmdline.Args("TYPE NAME ALLOC", "plugvisor plugin deregister csi-node ebs a1"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return pluginDeregister(cmd.Context(), common, args[0], args[1], args[2], force, cmd.OutOrStdout())
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().BoolVar(&force, "force", false, "deregister even the healthy current allocation of a plugin that still serves")
	return cmd
}

func newPluginWaitCmd() *cobra.Command {
	var common commonFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait TYPE NAME",
		Short: "wait until the agent answers and a plugin is registered and healthy",
		Long: `Waits until the agent answers, the plugin has a current allocation and, for
the CSI types (csi-controller, csi-node), that allocation is fingerprinted
healthy. For scripts that start an agent and a plugin, then use them. On a
terminal it shows what it waits for.`,
		Example: `  plugvisor plugin wait csi-controller hostpath
  plugvisor plugin wait -timeout 2m csi-node hostpath`,
		Args: cmdline.Args("TYPE NAME", "plugvisor plugin wait csi-node hostpath"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return pluginWait(cmd.Context(), common, args[0], args[1], timeout, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait")
	return cmd
}

// pluginJSON is a plugin as the API renders it.
type pluginJSON struct {
	Type       string            `json:"type"`
	Name       string            `json:"name"`
	Version    string            `json:"version,omitempty"`
	AllocID    string            `json:"alloc_id"`
	Connection map[string]any    `json:"connection,omitempty"`
	Options    map[string]string `json:"options,omitempty"`
}

func (p pluginJSON) address() string {
	for _, k := range []string{"socket_path", "address"} {
		if v, ok := p.Connection[k].(string); ok {
			return v
		}
	}
	return ""
}

// commonFlags are the flags every client command takes.
type commonFlags struct {
	dataDir string
	json    bool
}

func (c *commonFlags) register(fs interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
}) {
	fs.StringVar(&c.dataDir, "data-dir", agent.DefaultDataDir(), "the agent's data dir (env "+agent.DataDirEnv+")")
	fs.BoolVar(&c.json, "json", false, "print JSON for scripts instead of a table")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func pluginTable(w io.Writer, plugins []pluginJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tNAME\tALLOC\tVERSION\tADDRESS")
	for _, p := range plugins {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Type, p.Name, p.AllocID, p.Version, p.address())
	}
	tw.Flush()
}

func pluginList(ctx context.Context, common commonFlags, ptype string, stdout io.Writer) error {
	var out struct {
		Plugins []pluginJSON `json:"plugins"`
	}
	q := url.Values{}
	if ptype != "" {
		q.Set("type", ptype)
	}
	if err := newClient(common.dataDir).call(ctx, "GET", "/v1/plugins", q, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	if len(out.Plugins) == 0 {
		fmt.Fprintln(stdout, "no plugins registered")
		return nil
	}
	pluginTable(stdout, out.Plugins)
	return nil
}

// pluginStatusJSON is GET /v1/plugins/{type}/{name}.
type pluginStatusJSON struct {
	Current     pluginJSON   `json:"current"`
	Allocations []pluginJSON `json:"allocations"`
}

func getPluginStatus(ctx context.Context, c *client, ptype, name string) (pluginStatusJSON, error) {
	var out pluginStatusJSON
	path := "/v1/plugins/" + url.PathEscape(ptype) + "/" + url.PathEscape(name)
	return out, c.call(ctx, "GET", path, nil, nil, &out)
}

func pluginStatus(ctx context.Context, common commonFlags, ptype, name string, stdout io.Writer) error {
	out, err := getPluginStatus(ctx, newClient(common.dataDir), ptype, name)
	if err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "%s %s: current allocation %s (%s)\n\nallocations, newest first:\n",
		ptype, name, out.Current.AllocID, out.Current.address())
	pluginTable(stdout, out.Allocations)
	return nil
}

func pluginRegister(ctx context.Context, common commonFlags, p pluginJSON, force bool, stdout io.Writer) error {
	// The agent refuses to replace a healthy current allocation without
	// force (409, naming it), for every API client alike.
	body := struct {
		pluginJSON
		Force bool `json:"force,omitempty"`
	}{p, force}
	var out map[string]pluginJSON
	if err := newClient(common.dataDir).call(ctx, "POST", "/v1/plugins", nil, body, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "registered %s %s alloc %s; current allocation is %s\n",
		p.Type, p.Name, p.AllocID, out["current"].AllocID)
	return nil
}

func pluginDeregister(ctx context.Context, common commonFlags, ptype, name, alloc string, force bool, stdout io.Writer) error {
	var out struct {
		Current *pluginJSON `json:"current"`
	}
	path := "/v1/plugins/" + url.PathEscape(ptype) + "/" + url.PathEscape(name) + "/" + url.PathEscape(alloc)
	var query url.Values
	if force {
		query = url.Values{"force": {"true"}}
	}
	if err := newClient(common.dataDir).call(ctx, "DELETE", path, query, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	if out.Current == nil || out.Current.AllocID == "" {
		fmt.Fprintf(stdout, "deregistered %s %s alloc %s; the plugin is gone\n", ptype, name, alloc)
		return nil
	}
	fmt.Fprintf(stdout, "deregistered %s %s alloc %s; current allocation is %s\n", ptype, name, alloc, out.Current.AllocID)
	return nil
}

// healthJSON is one plugin instance of /v1/csi/instances or /v1/docker/plugins.
type healthJSON struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	AllocID string `json:"alloc_id"`
	Healthy bool   `json:"healthy"`
}

// pluginHealthy says whether the agent found alloc of the plugin healthy
// (false until it has checked), and whether it checks the health of the
// type at all.
func pluginHealthy(ctx context.Context, c *client, ptype, name, alloc string) (healthy, checked bool, err error) {
	path := map[string]string{csi.TypeController: "/v1/csi/instances", csi.TypeNode: "/v1/csi/instances",
		dockervolume.PluginType: "/v1/docker/plugins"}[ptype]
	if path == "" {
		return false, false, nil
	}
	var out struct {
		Plugins []healthJSON `json:"plugins"`
	}
	if err := c.call(ctx, "GET", path, nil, nil, &out); err != nil {
		return false, true, err
	}
	for _, h := range out.Plugins {
		if (h.Type == ptype || h.Type == "") && h.Name == name && h.AllocID == alloc {
			return h.Healthy, true, nil
		}
	}
	return false, true, nil
}

// pluginWait waits until the agent answers and the plugin is registered
// and, when the agent checks its health, healthy.
func pluginWait(ctx context.Context, common commonFlags, ptype, name string, timeout time.Duration, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := newClient(common.dataDir)
	what := fmt.Sprintf("waiting for %s %s", ptype, name)
	p := startProgress(stderr, common.json, what)
	defer p.end()
	var state string
	for {
		st, err := getPluginStatus(ctx, c, ptype, name)
		var healthy, checked bool
		if err == nil {
			healthy, checked, err = pluginHealthy(ctx, c, ptype, name, st.Current.AllocID)
		}
		var noAgent *errNoAgent
		switch {
		case errors.As(err, &noAgent):
			state = "the agent does not answer yet"
		case isStatus(err, http.StatusNotFound):
			state = "not registered yet"
		case err != nil && ctx.Err() == nil:
			return err
		case err == nil && checked && !healthy:
			state = "allocation " + st.Current.AllocID + " is not healthy yet"
		case err == nil:
			p.end()
			if common.json {
				return printJSON(stdout, st.Current)
			}
			fmt.Fprintf(stdout, "%s %s is ready: allocation %s at %s%s\n", ptype, name, st.Current.AllocID,
				st.Current.address(), map[bool]string{true: ", healthy"}[checked])
			return nil
		}
		p.set(what + ": " + state)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s not ready after %s: %s", ptype, name, timeout, state)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
