package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/plugvisor/plugvisor/agent"
)

const pluginHelp = `Usage: plugvisor plugin <list|status|register|deregister> [flags] [args]

  list                          the current allocation of every plugin
  status TYPE NAME              one plugin: current allocation and all others
  register -type T -name N -alloc A -socket PATH [-version V] [-option k=v]
  deregister TYPE NAME ALLOC    remove one allocation

Examples:
  plugvisor plugin list -type csi-node
  plugvisor plugin register -type csi-node -name hostpath -alloc a1 -socket /run/csi/a1.sock
  plugvisor plugin status -json csi-node hostpath
  plugvisor plugin deregister csi-node hostpath a1`

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

func runPlugin(args []string, stdout, stderr io.Writer) error {
	sub, args, err := subcommand(args, pluginHelp, stdout)
	if err != nil {
		return err
	}
	fs := newFlags("plugin "+sub, pluginHelp, stdout)
	var common commonFlags
	common.register(fs)
	switch sub {
	case "list":
		ptype := fs.String("type", "", "only plugins of this type, e.g. csi-node")
		if err := parse(fs, args); err != nil {
			return err
		}
		return pluginList(common, *ptype, stdout)
	case "status":
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 2 {
			return usageError("status needs TYPE NAME, e.g. plugvisor plugin status csi-node hostpath")
		}
		return pluginStatus(common, fs.Arg(0), fs.Arg(1), stdout)
	case "register":
		var p pluginJSON
		var socket, address string
		var options stringList
		fs.StringVar(&p.Type, "type", "", "plugin type, e.g. csi-node (required)")
		fs.StringVar(&p.Name, "name", "", "plugin name (required)")
		fs.StringVar(&p.AllocID, "alloc", "", "allocation ID of this running copy (required)")
		fs.StringVar(&p.Version, "version", "", "plugin version")
		fs.StringVar(&socket, "socket", "", "absolute unix socket path, at most 107 bytes")
		fs.StringVar(&address, "address", "", "network address tcp://host:port (instead of -socket)")
		fs.Var(&options, "option", "key=value option (repeatable)")
		if err := parse(fs, args); err != nil {
			return err
		}
		p.Connection = map[string]any{}
		if socket != "" {
			p.Connection["socket_path"] = socket
		}
		if address != "" {
			p.Connection["address"] = address
		}
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
		return pluginRegister(common, p, stdout)
	case "deregister":
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 3 {
			return usageError("deregister needs TYPE NAME ALLOC, e.g. plugvisor plugin deregister csi-node hostpath a1")
		}
		return pluginDeregister(common, fs.Arg(0), fs.Arg(1), fs.Arg(2), stdout)
	}
	return usageError("unknown subcommand %q (want list, status, register or deregister)", sub)
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

func pluginList(common commonFlags, ptype string, stdout io.Writer) error {
	var out struct {
		Plugins []pluginJSON `json:"plugins"`
	}
	q := url.Values{}
	if ptype != "" {
		q.Set("type", ptype)
	}
	if err := newClient(common.dataDir).call(context.Background(), "GET", "/v1/plugins", q, nil, &out); err != nil {
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

func pluginStatus(common commonFlags, ptype, name string, stdout io.Writer) error {
	var out struct {
		Current     pluginJSON   `json:"current"`
		Allocations []pluginJSON `json:"allocations"`
	}
	path := "/v1/plugins/" + url.PathEscape(ptype) + "/" + url.PathEscape(name)
	if err := newClient(common.dataDir).call(context.Background(), "GET", path, nil, nil, &out); err != nil {
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

func pluginRegister(common commonFlags, p pluginJSON, stdout io.Writer) error {
	var out map[string]pluginJSON
	if err := newClient(common.dataDir).call(context.Background(), "POST", "/v1/plugins", nil, p, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "registered %s %s alloc %s; current allocation is %s\n",
		p.Type, p.Name, p.AllocID, out["current"].AllocID)
	return nil
}

func pluginDeregister(common commonFlags, ptype, name, alloc string, stdout io.Writer) error {
	var out struct {
		Current *pluginJSON `json:"current"`
	}
	path := "/v1/plugins/" + url.PathEscape(ptype) + "/" + url.PathEscape(name) + "/" + url.PathEscape(alloc)
	if err := newClient(common.dataDir).call(context.Background(), "DELETE", path, nil, nil, &out); err != nil {
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
