package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/plugvisor/plugvisor/api"
	"github.com/plugvisor/plugvisor/csi/volumes"
	cmdline "github.com/plugvisor/plugvisor/internal/cli"
)

const volumeLong = `CSI volumes in the agent's catalog, by namespace and ID. "create" makes a
volume with the plugin's controller; "register" records one the plugin
already has. A mount claims the volume for the alloc first: a second writer
on a single-node-writer volume is refused. A reader (-read-only) joins a
writer on the same node: the volume is staged once and published read-only
for the reader. An unmount releases the claim its mount made; a claim made
with "claim" stays until "release", which is refused while the alloc has
the volume mounted. "detach" forces the controller to unpublish the volume
from a node (the plugin's node ID), as "nomad volume detach" does. In a
fleet, NODE may be a node of the fleet: the detach uses the plugin node ID
the fleet recorded for it, and is refused while that node is up or holds
claims, so a dead node's attachment can be undone from any member.

Access modes: single-node-reader-only, single-node-writer, multi-node-reader-only,
multi-node-single-writer, multi-node-multi-writer.`

const volumeExample = `  plugvisor volume create -plugin hostpath -access-mode single-node-writer -size 1GiB db
  plugvisor volume mount db web-1
  plugvisor volume mount -read-only db report-1
  plugvisor volume status -json db
  plugvisor volume unmount db web-1
  plugvisor volume delete db`

func newVolumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Short:   "create, register, list, inspect, mount, unmount, expand and delete CSI volumes",
		Long:    volumeLong,
		Example: volumeExample,
	}
	cmd.AddCommand(newVolumeCreateCmd(), newVolumeDeleteCmd(false), newVolumeDeleteCmd(true), newVolumeExpandCmd(), newVolumeModifyCmd(),
		newVolumeRegisterCmd(), newVolumeListCmd(), newVolumeStatusCmd(), newVolumeDetachCmd(),
		newVolumeAllocCmd("claim", "claim a volume for an alloc, without mounting it", "  plugvisor volume claim db batch-1\n  plugvisor volume claim -read-only db report-1"),
		newVolumeAllocCmd("release", "release a claim made with claim", "  plugvisor volume release db batch-1"),
		newVolumeAllocCmd("mount", "claim and mount a volume for an alloc", "  plugvisor volume mount db web-1\n  plugvisor volume mount -read-only db report-1"),
		newVolumeAllocCmd("unmount", "unmount a volume for an alloc and release its claim", "  plugvisor volume unmount db web-1"))
	return cmd
}

// volumeFlags are the flags every volume and snapshot command takes: the
// common ones and -namespace.
type volumeFlags struct {
	common    commonFlags
	namespace string
}

// newVolumeLeaf returns a volume command with the flags every one takes.
func newVolumeLeaf(cmd *cobra.Command) (*cobra.Command, *volumeFlags) {
	vf := &volumeFlags{}
	vf.common.register(cmd.Flags())
	cmd.Flags().StringVar(&vf.namespace, "namespace", "default", "the volume's namespace")
	return cmd, vf
}

func (vf *volumeFlags) client() *client { return newClient(vf.common.dataDir) }

// callShowing sends a request of cmd, showing progress that says what on
// a terminal while it waits for the answer.
func (vf *volumeFlags) callShowing(cmd *cobra.Command, what, method, path string, query url.Values, body, out any) error {
	p := startProgress(cmd.ErrOrStderr(), vf.common.json, what)
	defer p.end()
	return vf.client().call(cmd.Context(), method, path, query, body, out)
}

func newVolumeRegisterCmd() *cobra.Command {
	var body api.VolumeBody
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:   "register (-id ID -plugin P (-access-mode M | -capability access=M[,attachment=A][,fs=T]...) | -f VOLUMES.json)",
		Short: "record a volume the plugin already has, by its ID",
		Example: `  plugvisor volume register -id vol-1 -plugin hostpath -access-mode single-node-writer
  plugvisor volume register -id vol-2 -plugin hostpath -access-mode multi-node-reader-only -namespace batch
  plugvisor volume register -id vol-3 -plugin ebs -capability access=single-node-writer,fs=ext4 -capability access=multi-node-reader-only
  plugvisor volume register -f volumes.json`,
		Args: cmdline.Args("", "plugvisor volume register -id vol-1 -plugin hostpath -access-mode single-node-writer"),
	})
	var topologies topologyList
	var caps capabilityList
	var file string
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if file != "" {
			return registerBatch(cmd, vf, file)
		}
		if err := cmdline.Missing(cmd, "id", "plugin"); err != nil {
			return err
		}
		body.Namespace, body.Topologies = vf.namespace, topologies
		modeSet := cmd.Flags().Changed("access-mode") || cmd.Flags().Changed("attachment-mode")
		if err := registerModes(&body, caps, modeSet); err != nil {
			return err
		}
		if err := checkModes(body.AccessMode, body.AttachmentMode); err != nil {
			return err
		}
		var v api.VolumeJSON
		if err := vf.client().call(cmd.Context(), "POST", "/v1/volumes", nil, body, &v); err != nil {
			return err
		}
		return printVolume(cmd.OutOrStdout(), vf.common, v, fmt.Sprintf("registered volume %s/%s on plugin %s", v.Namespace, v.ID, v.PluginID))
	}
	cmd.Flags().StringVar(&body.ID, "id", "", "the volume's ID, as the plugin knows it")
	cmd.Flags().StringVar(&body.PluginID, "plugin", "", "the CSI plugin that serves it")
	cmd.Flags().StringVar(&body.AccessMode, "access-mode", "", "access mode, e.g. single-node-writer")
	cmd.Flags().StringVar(&body.AttachmentMode, "attachment-mode", "file-system", "file-system or block-device")
	cmd.Flags().Var(&topologies, "topology", "a topology the volume can be reached from, KEY=VALUE[,KEY=VALUE] (repeatable; required by plugins with VOLUME_ACCESSIBILITY_CONSTRAINTS)")
	cmd.Flags().Var(&caps, "capability", "one of the volume's capabilities, access=MODE[,attachment=file-system|block-device][,fs=TYPE] (repeatable; each claim or mount chooses one with -access-mode); instead of -access-mode")
	cmd.Flags().StringVarP(&file, "file", "f", "", "register a batch instead, all or none: a JSON list of volumes as POST /v1/volumes takes them (id, plugin_id, access_mode ... ; namespace defaults to -namespace); at most 25")
	return cmd
}

func newVolumeListCmd() *cobra.Command {
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "list",
		Short:   "the volumes of a namespace",
		Example: "  plugvisor volume list\n  plugvisor volume list -namespace batch -json\n  plugvisor volume list -plugin hostpath",
		Args:    cmdline.Args("", "plugvisor volume list -namespace batch"),
	})
	var plugin string
	cmd.Flags().StringVar(&plugin, "plugin", "", "only the volumes of this CSI plugin")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return volumeList(cmd.Context(), vf.client(), vf.common, url.Values{"namespace": {vf.namespace}, "plugin": {plugin}}, cmd.OutOrStdout())
	}
	return cmd
}

func newVolumeStatusCmd() *cobra.Command {
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "status ID",
		Short:   "a volume: the catalog's record, past claims, this node's mounts and stats",
		Example: "  plugvisor volume status db\n  plugvisor volume status -json db",
		Args:    cmdline.Args("ID", "plugvisor volume status db"),
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var st api.StatusJSON
		if err := vf.client().call(cmd.Context(), "GET", volumePath(vf.namespace, args[0], "status"), nil, nil, &st); err != nil {
			return err
		}
		return printStatus(cmd.OutOrStdout(), vf.common, vf.namespace, args[0], st)
	}
	return cmd
}

func newVolumeDetachCmd() *cobra.Command {
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     "detach ID NODE",
		Short:   "force the controller to unpublish a volume from a node",
		Example: "  plugvisor volume detach db node-7",
		Args:    cmdline.Args("ID NODE", "plugvisor volume detach db node-7"),
	})
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var out map[string]any
		body := api.DetachBody{NodeID: args[1]}
		if err := vf.client().call(cmd.Context(), "POST", volumePath(vf.namespace, args[0], "detach"), nil, body, &out); err != nil {
			return err
		}
		return printDone(cmd.OutOrStdout(), vf.common, out, "detached %s/%s from node %s\n", vf.namespace, args[0], body.NodeID)
	}
	return cmd
}

// newVolumeAllocCmd returns claim, release, mount or unmount: an operation
// on a volume for an alloc. Mount and unmount show progress on a terminal.
func newVolumeAllocCmd(sub, short, example string) *cobra.Command {
	var body api.AllocBody
	cmd, vf := newVolumeLeaf(&cobra.Command{
		Use:     sub + " ID ALLOC",
		Short:   short,
		Example: example,
		Args:    cmdline.Args("ID ALLOC", "plugvisor volume "+sub+" db web-1"),
	})
	if sub == "claim" || sub == "mount" {
		cmd.Flags().BoolVar(&body.ReadOnly, "read-only", false, "a read claim (and a read-only mount)")
		cmd.Flags().StringVar(&body.AccessMode, "access-mode", "", "the volume's capability this "+sub+" uses, by its access mode (needed when the volume has several)")
		cmd.Flags().StringVar(&body.AttachmentMode, "attachment-mode", "", "the capability's attachment mode, when its access mode names several")
	}
	if sub == "mount" {
		cmd.Flags().StringVar(&body.MountGroup, "mount-group", "",
			"a GID (0 to 4294967294) the node plugin gives the alloc access as (CSI volume_mount_group); the plugin must advertise VOLUME_MOUNT_GROUP")
	}
	if sub == "unmount" {
		cmd.Flags().BoolVar(&body.Force, "force", false,
			"an operator's last resort when the plugin is gone or keeps failing: steps it cannot do are done in the kernel, the claim is released, and volume status says what was forced")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		body.AllocID = args[1]
		if err := checkUsageFlags(body); err != nil {
			return err
		}
		if volumes.CheckMountGroup(body.MountGroup) != nil {
			return usageError("-mount-group %q is not a GID: give a decimal number from 0 to %d", body.MountGroup, uint64(volumes.MaxMountGroup))
		}
		var out map[string]any
		what := fmt.Sprintf("%sing %s/%s for alloc %s", strings.TrimSuffix(sub, "e"), vf.namespace, args[0], body.AllocID)
		if err := vf.callShowing(cmd, what, "POST", volumePath(vf.namespace, args[0], sub), nil, body, &out); err != nil {
			return err
		}
		stdout := cmd.OutOrStdout()
		if sub == "mount" {
			return printDone(stdout, vf.common, out, "mounted %s/%s for alloc %s at %v\n", vf.namespace, args[0], body.AllocID, out["target_path"])
		}
		return printDone(stdout, vf.common, out, "%s: %s/%s for alloc %s\n", sub, vf.namespace, args[0], body.AllocID)
	}
	return cmd
}

// printDone prints out as JSON with -json, else the line format makes.
func printDone(w io.Writer, common commonFlags, out any, format string, args ...any) error {
	if common.json {
		return printJSON(w, out)
	}
	fmt.Fprintf(w, format, args...)
	return nil
}

// printStatus prints what the catalog and this node hold of a volume.
func printStatus(w io.Writer, common commonFlags, namespace, id string, st api.StatusJSON) error {
	if common.json {
		return printJSON(w, st)
	}
	if st.Volume != nil {
		if err := printVolume(w, common, *st.Volume, fmt.Sprintf("volume %s/%s", namespace, id)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "volume %s/%s is not in the catalog\n", namespace, id)
	}
	for _, c := range st.PastClaims {
		fmt.Fprintf(w, "  past claim: alloc %s (%s), %s (%s)\n", c.AllocID, c.Mode, c.State, orOK(c.LastError))
	}

	if err := printNode(w, st.Node); err != nil {
		return err
	}
	if st.LastOperation != "" {
		fmt.Fprintf(w, "  last operation: %s (%s)\n", st.LastOperation, orOK(st.LastError))
	}
	for _, o := range st.Orphans {
		fmt.Fprintf(w, "  orphan mount: %s\n", o)
	}
	if st.StatsError != "" {
		fmt.Fprintf(w, "  stats: error: %s\n", st.StatsError)
	}
	if st.Stats != nil {
		for _, u := range st.Stats.Usage {
			fmt.Fprintf(w, "  usage (%s): %d used of %d, %d available\n", u.Unit, u.Used, u.Total, u.Available)
		}
		if c := st.Stats.Condition; c != nil {
			fmt.Fprintf(w, "  condition: %s\n", map[bool]string{false: "normal", true: "abnormal"}[c.Abnormal]+orEmpty(": ", c.Message))
		}
	}
	return nil
}

// orEmpty is prefix+s, or "" when s is empty.
func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func orOK(err string) string {
	if err == "" {
		return "ok"
	}
	return "error: " + err
}

func volumePath(namespace, id, action string) string {
	p := "/v1/volumes/" + url.PathEscape(namespace) + "/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

func printVolume(w io.Writer, common commonFlags, v api.VolumeJSON, head string) error {
	if common.json {
		return printJSON(w, v)
	}
	fmt.Fprintf(w, "%s\n  plugin %s, %s, %s, schedulable: %v (%s)\n  writers: %s\n  readers: %s\n",
		head, v.PluginID, v.AccessMode, v.AttachmentMode, v.Schedulable, count(v.NodesHealthy, "healthy node"),
		orNone(v.WriteClaims), orNone(v.ReadClaims))
	fmt.Fprint(w, capabilitiesLine(v.Capabilities))
	if len(v.MutableParameters) > 0 {
		fmt.Fprintf(w, "  mutable parameters: %s\n", keyValuesLine(v.MutableParameters))
	}
	for _, a := range v.Attachments {
		fmt.Fprintf(w, "  attached to node %s (plugin node ID %s): %s\n", a.NodeID, a.ExternalNodeID, a.State)
	}
	return nil
}

func orNone(allocs []string) string {
	if len(allocs) == 0 {
		return "none"
	}
	return strings.Join(allocs, ", ")
}

func volumeList(ctx context.Context, c *client, common commonFlags, query url.Values, stdout io.Writer) error {
	var out struct {
		Volumes []map[string]any `json:"volumes"`
	}
	if err := c.call(ctx, "GET", "/v1/volumes", query, nil, &out); err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, out)
	}
	if len(out.Volumes) == 0 {
		fmt.Fprintln(stdout, "no volumes registered")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tID\tPLUGIN\tACCESS MODE\tSCHEDULABLE\tCLAIMS")
	for _, v := range out.Volumes {
		fmt.Fprintf(tw, "%v\t%v\t%v\t%v\t%v\t%s\n", v["namespace"], v["id"], v["plugin_id"], v["access_mode"], v["schedulable"],
			claimsColumn(v["current_writers"], v["current_readers"]))
	}
	return tw.Flush()
}

// claimsColumn is volume list's CLAIMS, from the stub's counts (JSON
// numbers): "1 writer, 2 readers", or "none".
func claimsColumn(writers, readers any) string {
	var parts []string
	for _, c := range []struct {
		n    any
		what string
	}{{writers, "writer"}, {readers, "reader"}} {
		switch n, _ := c.n.(float64); {
		case n == 1:
			parts = append(parts, "1 "+c.what)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%d %ss", int(n), c.what))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
