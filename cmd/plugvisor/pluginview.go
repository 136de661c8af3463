package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const pluginStatusLong = `With TYPE and NAME, one plugin's registration: its current allocation and
all others. With NAME alone, a CSI plugin's counts, as nomad plugin status
gives them: its controllers and nodes, healthy and expected. In a fleet the
counts are over every live node; on one agent they are this node's. The
expected counts are those that "plugvisor plugin expect" declared.`

const pluginExpectLong = `Declares how many node and controller instances of a CSI plugin run:
"plugvisor plugin status NAME" shows them as the expected counts. In a
fleet the declaration is kept in the fleet's etcd (one key per plugin); on
one agent, in its catalog's record of the plugin (it survives a restart).
It holds until declared again; 0 for both removes it, and a plugin then
left without instances or volumes is forgotten.`

// statusArgs lets plugin status take NAME (a CSI plugin's counts) or TYPE
// NAME (a plugin's allocations).
func statusArgs(c *cobra.Command, args []string) error {
	if len(args) == 1 || len(args) == 2 {
		return nil
	}
	return cmdline.Usagef("%s needs NAME or TYPE NAME, e.g. plugvisor plugin status hostpath, or plugvisor plugin status csi-node hostpath", c.Name())
}

func newPluginExpectCmd() *cobra.Command {
	var common commonFlags
	var body api.ExpectBody
	cmd := &cobra.Command{
		Use:     "expect NAME -nodes N -controllers M",
		Short:   "declare how many node and controller instances of a CSI plugin run",
		Long:    pluginExpectLong,
		Example: "  plugvisor plugin expect hostpath -nodes 3 -controllers 1\n  plugvisor plugin expect hostpath -nodes 0 -controllers 0",
		Args:    cmdline.Args("NAME", "plugvisor plugin expect hostpath -nodes 3 -controllers 1"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				Plugin *api.PluginViewJSON `json:"plugin"`
			}
			path := "/v1/csi/plugins/" + url.PathEscape(args[0]) + "/expect"
			if err := newClient(common.dataDir).call(cmd.Context(), "PUT", path, nil, body, &out); err != nil {
				return err
			}
			if common.json {
				return printJSON(cmd.OutOrStdout(), out)
			}
			if out.Plugin == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no expectation, and no node runs it\n", args[0])
				return nil
			}
			printPluginView(cmd.OutOrStdout(), *out.Plugin)
			return nil
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().IntVar(&body.Nodes, "nodes", 0, "how many node instances the fleet runs")
	cmd.Flags().IntVar(&body.Controllers, "controllers", 0, "how many controller instances the fleet runs")
	return cmd
}

// pluginView prints a CSI plugin's counts: plugin status NAME.
func pluginView(ctx context.Context, common commonFlags, name string, stdout io.Writer) error {
	var out struct {
		Plugin api.PluginViewJSON `json:"plugin"`
	}
	if err := newClient(common.dataDir).call(ctx, "GET", "/v1/csi/plugins/"+url.PathEscape(name), nil, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	printPluginView(stdout, out.Plugin)
	return nil
}

// printPluginView prints p as nomad plugin status does.
func printPluginView(w io.Writer, p api.PluginViewJSON) {
	fmt.Fprintf(w, "ID                   = %s\nProvider             = %s\nVersion              = %s\nScope                = %s\n"+
		"Controllers Healthy  = %d\nControllers Expected = %d\nNodes Healthy        = %d\nNodes Expected       = %d\n",
		p.ID, p.Provider, p.Version, p.Scope, p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected)
}
