package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const pluginStatusLong = `With no argument, every CSI plugin, as nomad plugin status lists them: its
type (which services run: node, controller, monolith when one allocation
serves both, split when each runs apart), its controllers and nodes,
healthy/expected, and its volumes. With NAME alone, one CSI plugin's
counts. With TYPE and NAME, one plugin's registration: its current
allocation and all others. In a fleet the counts are over every live node;
on one agent they are this node's. The expected counts are those that
"plugvisor plugin expect" declared.`

const pluginExpectLong = `Declares how many node and controller instances of a CSI plugin run:
"plugvisor plugin status NAME" shows them as the expected counts. In a
fleet the declaration is kept in the fleet's etcd (one key per plugin); on
one agent, in its catalog's record of the plugin (it survives a restart).
It holds until declared again; 0 for both removes it, and a plugin then
left without instances or volumes is forgotten.`

// statusArgs lets plugin status take nothing (every CSI plugin's counts),
// NAME (one CSI plugin's) or TYPE NAME (a plugin's allocations).
func statusArgs(c *cobra.Command, args []string) error {
	if len(args) <= 2 {
		return nil
	}
	return cmdline.Usagef("%s takes NAME or TYPE NAME, or nothing, e.g. plugvisor plugin status hostpath, or plugvisor plugin status csi-node hostpath", c.Name())
}

// pluginViews prints every CSI plugin's counts: plugin status.
func pluginViews(ctx context.Context, common commonFlags, stdout io.Writer) error {
	var out struct {
		Plugins []api.PluginViewJSON `json:"plugins"`
	}
	if err := newClient(common.dataDir).call(ctx, "GET", "/v1/csi/plugins", nil, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	if len(out.Plugins) == 0 {
		fmt.Fprintln(stdout, "no CSI plugins")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tPROVIDER\tCONTROLLERS HEALTHY/EXPECTED\tNODES HEALTHY/EXPECTED\tVOLUMES\tSCOPE")
	for _, p := range out.Plugins {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%s\n", p.ID, cmp.Or(p.Type, "-"), cmp.Or(p.Provider, "-"),
			p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected, p.Volumes, p.Scope)
	}
	return tw.Flush()
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
	fmt.Fprintf(w, "ID                   = %s\nType                 = %s\nProvider             = %s\nVersion              = %s\nScope                = %s\n"+
		"Controllers Healthy  = %d\nControllers Expected = %d\nNodes Healthy        = %d\nNodes Expected       = %d\nVolumes              = %d\n",
		p.ID, cmp.Or(p.Type, "-"), p.Provider, p.Version, p.Scope, p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected, p.Volumes)
}
