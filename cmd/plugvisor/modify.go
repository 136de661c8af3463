package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

func newVolumeModifyCmd() *cobra.Command {
	var params keyValues
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:   "modify -param KEY=VALUE ID",
		Short: "change a volume's mutable parameters with the plugin's controller",
		Long: `Changes a volume's mutable parameters with the plugin's controller
(ControllerModifyVolume), when it advertises MODIFY_VOLUME; otherwise the
modify is refused and the plugin is not asked. The plugin checks the keys
and values: a strict one refuses a key it does not know. Once the plugin
took them, the catalog records them with the volume, merged into those
earlier modifies set: volume status shows them.`,
		Example: "  plugvisor volume modify -param tier=fast db\n  plugvisor volume modify -param tier=standard -param label=nightly db",
		Args:    cmdline.Args("ID", "plugvisor volume modify -param tier=fast db"),
	})
	cmd.Flags().Var(&params, "param", "a mutable parameter KEY=VALUE to set (repeatable)")
	cmdline.Require(cmd, "param")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var out struct {
			Volume api.ManagedVolumeJSON `json:"volume"`
		}
		what := fmt.Sprintf("modifying volume %s/%s", vf.namespace, args[0])
		if err := vf.callShowing(cmd, what, "POST", volumePath(vf.namespace, args[0], "modify"), nil,
			api.ModifyBody{MutableParameters: params}, &out); err != nil {
			return err
		}
		if vf.common.json {
			return printJSON(cmd.OutOrStdout(), out)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "modified volume %s/%s: %s set; now %s\n",
			vf.namespace, args[0], count(len(params), "mutable parameter"), keyValuesLine(out.Volume.MutableParameters))
		return nil
	}
	return cmd
}

// keyValuesLine is m as "k1=v1, k2=v2", sorted by key.
func keyValuesLine(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}
