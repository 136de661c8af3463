package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const pluginCapacityLong = `Asks a CSI plugin's controller how much room it has for new volumes
(GetCapacity), for the volumes' capabilities, parameters and topology when
given. A plugin that does not advertise GET_CAPACITY is refused, and is not
asked.`

const pluginCapacityExample = `  plugvisor plugin capacity hostpath
  plugvisor plugin capacity -capability access=single-node-writer hostpath
  plugvisor plugin capacity -capability access=single-node-reader-only,attachment=block-device -parameter tier=fast ebs
  plugvisor plugin capacity -topology topology.hostpath.csi.plugvisor.io/node=n1 -json hostpath`

// capacityCapabilities is plugin capacity's -capability, repeatable, in
// volume register's syntax (model.CapabilitySyntax), which the API's
// capability query parameter takes as it is.
type capacityCapabilities []string

func (c *capacityCapabilities) String() string { return strings.Join(*c, " ") }

// Type names the flag's value in help.
func (c *capacityCapabilities) Type() string { return model.CapabilitySyntax }

// Set adds v once model.ParseCapability reads it.
func (c *capacityCapabilities) Set(v string) error {
	if _, err := model.ParseCapability(v); err != nil {
		return err
	}
	*c = append(*c, v)
	return nil
}

func newPluginCapacityCmd() *cobra.Command {
	var common commonFlags
	var caps capacityCapabilities
	var params keyValues
	var topology topologyList
	cmd := &cobra.Command{
		Use:     "capacity PLUGIN",
		Short:   "a CSI plugin controller's room for new volumes (GetCapacity)",
		Long:    pluginCapacityLong,
		Example: pluginCapacityExample,
		Args:    cmdline.Args("PLUGIN", "plugvisor plugin capacity hostpath"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(topology) > 1 {
				return usageError("-topology is given %d times: GetCapacity takes one topology; join its segments with commas", len(topology))
			}
			query := url.Values{"capability": caps}
			for _, k := range slices.Sorted(maps.Keys(params)) {
				query.Add("parameter", k+"="+params[k])
			}
			if len(topology) == 1 {
				var segs []string
				for _, k := range slices.Sorted(maps.Keys(topology[0])) {
					segs = append(segs, k+"="+topology[0][k])
				}
				query.Set("topology", strings.Join(segs, ","))
			}
			return pluginCapacity(cmd.Context(), common, args[0], query, cmd.OutOrStdout())
		},
	}
	common.register(cmd.Flags())
	cmd.Flags().Var(&caps, "capability", "a capability the volumes would have, e.g. access=single-node-writer or access=multi-node-reader-only,attachment=block-device (repeatable)")
	cmd.Flags().Var(&params, "parameter", "a creation parameter KEY=VALUE (repeatable)")
	cmd.Flags().Var(&topology, "topology", "where the volumes would be reachable, KEY=VALUE[,KEY=VALUE]")
	return cmd
}

func pluginCapacity(ctx context.Context, common commonFlags, plugin string, query url.Values, stdout io.Writer) error {
	var out api.PluginCapacityJSON
	if err := newClient(common.dataDir).call(ctx, "GET", "/v1/csi/plugins/"+url.PathEscape(plugin)+"/capacity", query, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "plugin %s: %d bytes available", out.PluginID, out.AvailableBytes)
	if out.MaximumVolumeSize != nil {
		fmt.Fprintf(stdout, ", largest volume %d bytes", *out.MaximumVolumeSize)
	}
	if out.MinimumVolumeSize != nil {
		fmt.Fprintf(stdout, ", smallest volume %d bytes", *out.MinimumVolumeSize)
	}
	fmt.Fprintln(stdout)
	return nil
}
